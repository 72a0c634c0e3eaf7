"""GPU attribution. No GPU exists on the development machines, so NVML's device calls are
replaced by a stand-in here (the exceptions and constants are the real pynvml ones); the
`gpu`-marked test runs against the real NVML where a GPU is visible."""

from __future__ import annotations

import os
import sys
import textwrap
import time
from types import SimpleNamespace

import pynvml
import pytest

from ringflow.core.jsonio import read_jsonl
from ringflow.supervisor import HealthSettings, ResourceLimits, supervise
from ringflow.supervisor.activity import judge_window
from ringflow.supervisor.gpu import GpuMonitor, parse_visible_devices
from ringflow.supervisor.sampling import Sample

INVISIBLE_PID = 99_999_999  # above any pid_max: as seen from another PID namespace


class FakeNvml:
    """Device calls of NVML over a scripted state; errors and constants are pynvml's."""

    NVMLError = pynvml.NVMLError
    NVML_SUCCESS = pynvml.NVML_SUCCESS
    NVML_ERROR_NOT_FOUND = pynvml.NVML_ERROR_NOT_FOUND
    NVML_ERROR_FUNCTION_NOT_FOUND = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    NVML_ERROR_NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED

    def __init__(self, versions=("v3", "v2", "v1"), missing_in_driver=(), init_error=None):
        self.procs: list[SimpleNamespace] = []
        self.pending_samples: list[SimpleNamespace] = []
        self.device_util = 0
        self.calls: list[str] = []
        self.init_error = init_error
        names = {
            "v3": "nvmlDeviceGetComputeRunningProcesses_v3",
            "v2": "nvmlDeviceGetComputeRunningProcesses_v2",
            "v1": "nvmlDeviceGetComputeRunningProcesses",
        }
        for version in versions:
            setattr(
                self, names[version], self._compute(names[version], version in missing_in_driver)
            )

    def _compute(self, name, missing):
        def call(handle):
            self.calls.append(name)
            if missing:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
            return list(self.procs)

        return call

    def nvmlInit(self):
        if self.init_error is not None:
            raise self.init_error

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, index):
        return f"handle-{index}"

    def nvmlDeviceGetUUID(self, handle):
        return "GPU-aaaa-0000"

    def nvmlDeviceGetProcessUtilization(self, handle, last_seen):
        fresh = [s for s in self.pending_samples if s.timeStamp > last_seen]
        self.pending_samples = []
        if not fresh:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return fresh

    def nvmlDeviceGetUtilizationRates(self, handle):
        return SimpleNamespace(gpu=self.device_util, memory=0)

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(used=5 * 2**30, total=80 * 2**30, free=75 * 2**30)

    def add_sample(self, pid, sm):
        stamp = int(time.time() * 1e6) + 1000 + len(self.calls)
        self.pending_samples.append(
            SimpleNamespace(pid=pid, timeStamp=stamp, smUtil=sm, memUtil=0, encUtil=0, decUtil=0)
        )


def proc(pid, mem):
    return SimpleNamespace(pid=pid, usedGpuMemory=mem)


def test_compute_processes_fall_back_v3_v2_v1():
    fake = FakeNvml(missing_in_driver=("v3",))
    monitor = GpuMonitor(nvml=fake)
    monitor.poll([os.getpid()], now=1.0)
    assert fake.calls[:2] == [
        "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetComputeRunningProcesses_v2",
    ]
    monitor.poll([os.getpid()], now=2.0)  # the working version is remembered
    assert fake.calls[2:] == ["nvmlDeviceGetComputeRunningProcesses_v2"]

    old_binding = FakeNvml(versions=("v1",))  # a binding that predates _v2 and _v3
    monitor = GpuMonitor(nvml=old_binding)
    monitor.poll([os.getpid()], now=1.0)
    assert old_binding.calls == ["nvmlDeviceGetComputeRunningProcesses"]
    assert monitor.take(now=1.0).errors == []


def test_not_found_is_zero_and_sm_is_integrated_over_the_window():
    me = os.getpid()
    fake = FakeNvml()
    fake.procs = [proc(me, 2**30)]
    monitor = GpuMonitor(nvml=fake)
    monitor.take(now=100.0)
    monitor.poll([me], now=100.0)
    fake.add_sample(me, 60)
    monitor.poll([me], now=101.0)  # 60 % over this second
    monitor.poll([me], now=103.0)  # NOT_FOUND: no new sample, zero for two seconds
    window = monitor.take(now=104.0)
    assert window.attribution == "pid" and window.available
    assert window.sm_pct_max == 60
    assert window.sm_pct_avg == pytest.approx(60 * 1 / 4)
    assert window.memory_bytes_max == 2**30
    assert window.pids == [me]
    assert not window.queueing and window.errors == []


def test_pid_versus_device_attribution():
    me = os.getpid()
    # Foreign PIDs invisible in our /proc on the GPU assigned to us: another PID namespace.
    fake = FakeNvml()
    fake.procs = [proc(INVISIBLE_PID, 3 * 2**30)]
    fake.device_util = 70
    monitor = GpuMonitor(nvml=fake, env={"CUDA_VISIBLE_DEVICES": "0"})
    monitor.take(now=0.0)
    monitor.poll([me], now=0.0)
    monitor.poll([me], now=1.0)
    window = monitor.take(now=1.0)
    assert window.attribution == "device"
    assert window.sm_pct_max == 70 and window.memory_bytes_max == 5 * 2**30

    # The same, but the GPU is not assigned to us: never the whole card's figures.
    monitor = GpuMonitor(nvml=fake, env={})
    monitor.poll([me], now=0.0)
    window = monitor.take(now=1.0)
    assert window.attribution == "pid" and window.sm_pct_max == 0

    # A visible foreign process (someone else's job) is not ours either.
    fake.procs = [proc(1, 2**30)]
    monitor = GpuMonitor(nvml=fake, gpu_ids=[0])
    monitor.poll([me], now=0.0)
    window = monitor.take(now=1.0)
    assert window.attribution == "pid" and window.memory_bytes_max == 0

    # UUIDs in CUDA_VISIBLE_DEVICES resolve to indices.
    assert GpuMonitor(nvml=fake, env={"CUDA_VISIBLE_DEVICES": "GPU-aaaa"}).assigned == [0]
    assert parse_visible_devices("") == [] and parse_visible_devices(None) is None


def test_queueing_counts_as_activity():
    me = os.getpid()
    fake = FakeNvml()
    fake.procs = [proc(me, 2**30)]  # our context exists, others keep the SMs busy
    fake.device_util = 90
    monitor = GpuMonitor(nvml=fake)
    monitor.poll([me], now=0.0)
    window = monitor.take(now=1.0)
    assert window.queueing
    prev = Sample(t=0.0, wall=0.0, ok=True)
    cur = Sample(t=1.0, wall=1.0, ok=True, gpu=window)
    verdict = judge_window(prev, cur, HealthSettings())
    assert verdict.reasons == ["gpu_queueing"]


def test_no_gpu_is_a_normal_case():
    monitor = GpuMonitor(nvml=FakeNvml(init_error=pynvml.NVMLError_LibraryNotFound()))
    window = monitor.take()
    assert not monitor.available
    assert (window.available, window.attribution) == (False, "none")
    assert "LibraryNotFound" in window.reason
    monitor.poll([os.getpid()])  # harmless


def test_a_run_no_gpu_reaches_loads_no_nvml(monkeypatch):
    """A sandboxed run without an allocation has no GPU device: nothing to watch, and NVML
    is neither loaded nor initialised for it (docs/operations.md#health-supervision)."""
    import ringflow.supervisor.gpu as gpu_module

    def refuse(nvml=None):
        raise AssertionError("NVML was opened for a run no GPU reaches")

    monkeypatch.setattr(gpu_module, "open_nvml", refuse)
    monitor = GpuMonitor(off="no GPU was given to this execution")
    window = monitor.take()
    assert not monitor.available
    assert (window.available, window.attribution) == (False, "none")
    assert monitor.reason == "no GPU was given to this execution"
    monitor.poll([os.getpid()])  # harmless


def test_default_path_uses_the_real_nvml():
    monitor = GpuMonitor()
    if monitor.available:
        pytest.skip("a GPU is visible: the gpu-marked test covers this machine")
    assert monitor.take().attribution == "none"
    assert "nvmlInit failed" in monitor.reason


def _gpu_visible() -> bool:
    try:
        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetCount() > 0
    except pynvml.NVMLError:
        return False


@pytest.mark.gpu
def test_real_cuda_workload_is_attributed_to_the_execution(tmp_path):
    if not _gpu_visible():
        pytest.skip("no GPU visible (nvmlInit failed or no device)")
    torch = pytest.importorskip("torch", reason="torch is needed for a CUDA workload")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    code = """
    import os, time, torch
    open("program.pid", "w").write(str(os.getpid()))
    x = torch.randn(4096, 4096, device="cuda")
    end = time.time() + 8
    while time.time() < end:
        y = x @ x
        torch.cuda.synchronize()
    """
    (tmp_path / "prog.py").write_text(textwrap.dedent(code))
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LD_LIBRARY_PATH", "HOME")}
    outcome = supervise(
        [sys.executable, "prog.py"],
        cwd=tmp_path,
        env=env,
        stdout_path=tmp_path / "out",
        stderr_path=tmp_path / "err",
        health_dir=tmp_path / "health",
        settings=HealthSettings(collect_s=0.5, interval_s=2, hang_min=5, term_grace_s=2),
        limits=ResourceLimits(memory_gb=None),
        gpu_ids=[0],
    )
    assert outcome.status == "ok", (tmp_path / "err").read_text()
    program = int((tmp_path / "program.pid").read_text())
    lines = read_jsonl(outcome.health_jsonl)
    assert all(line["gpu_attribution"] in ("pid", "device") for line in lines)
    assert any(program in line["gpu_pids"] for line in lines)
    assert max(line["gpu_sm_pct_max"] for line in lines) > 0
    assert max(line["gpu_memory_bytes_max"] for line in lines) > 0
    assert all(line["probes"]["gpu"] for line in lines)
