"""GPUs for executions (docs/operations.md#gpus-and-slurm): slots, device nodes, UUIDs, all on a
fake NVML here.

The fake `pynvml` in tests/fake_nvml stands in for the library where no GPU exists; the
`gpu`-marked tests in test_supervisor_gpu.py run the real one where a GPU is present.
"""

from __future__ import annotations

import importlib.util
import os
import stat
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from ringflow.core.errors import DeadlineReached, SandboxError
from ringflow.sandbox.gpus import allocate, device_nodes, gpu_facts, machine_gpus

FAKE_DIR = Path(__file__).resolve().parents[2] / "fake_nvml"


def fake_nvml(count: int = 2, monkeypatch=None):
    if monkeypatch is not None:
        monkeypatch.setenv("RINGFLOW_FAKE_GPUS", str(count))
    spec = importlib.util.spec_from_file_location("fake_pynvml", FAKE_DIR / "pynvml.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def never():
    return None


def test_facts_record_models_driver_and_cuda(monkeypatch):
    facts = gpu_facts(fake_nvml(2, monkeypatch))
    assert facts == {"gpus": ["Fake GPU"], "driver": "999.99", "cuda": "12.4"}


def test_executions_at_once_get_different_gpus_and_a_third_waits(tmp_path, monkeypatch):
    nvml = fake_nvml(2, monkeypatch)
    with ExitStack() as first, ExitStack() as second:
        a = allocate(1, tmp_path, first, should_stop=never, env={}, nvml=nvml)
        b = allocate(1, tmp_path, second, should_stop=never, env={}, nvml=nvml)
        assert a.visible_devices != b.visible_devices
        assert {a.visible_devices, b.visible_devices} == {"GPU-fake-0", "GPU-fake-1"}
        started = time.monotonic()
        deadline = started + 1.0
        with pytest.raises(DeadlineReached, match="no free GPU"):
            allocate(
                1,
                tmp_path,
                ExitStack(),
                env={},
                nvml=nvml,
                should_stop=lambda: "cut" if time.monotonic() > deadline else None,
            )
        assert time.monotonic() - started >= 1.0
    with ExitStack() as again:
        assert len(allocate(2, tmp_path, again, should_stop=never, env={}, nvml=nvml).gpus) == 2


def test_a_slurm_job_keeps_its_own_allocation(tmp_path, monkeypatch):
    nvml = fake_nvml(4, monkeypatch)
    env = {"SLURM_JOB_ID": "7", "CUDA_VISIBLE_DEVICES": "2"}
    with ExitStack() as held:
        given = allocate(1, tmp_path, held, should_stop=never, env=env, nvml=nvml)
    assert given.how == "scheduler" and given.visible_devices == "GPU-fake-2"
    with pytest.raises(SandboxError, match="given 1 GPU"):
        allocate(2, tmp_path, ExitStack(), should_stop=never, env=env, nvml=nvml)


def test_more_gpus_than_the_machine_has_is_refused(tmp_path, monkeypatch):
    with pytest.raises(SandboxError, match="NVML sees 2"):
        allocate(3, tmp_path, ExitStack(), should_stop=never, env={},
                 nvml=fake_nvml(2, monkeypatch))  # fmt: skip


def make_device_nodes(root: Path, minors=(0, 1)) -> None:
    """Fake /dev entries: real character devices as root (mknod), plain files otherwise."""
    root.mkdir()
    names = [f"nvidia{m}" for m in minors] + ["nvidiactl", "nvidia-uvm"]
    for name in names:
        if os.geteuid() == 0:
            os.mknod(root / name, 0o666 | stat.S_IFCHR, os.makedev(195, 0))
        else:
            (root / name).write_text("")


def test_device_nodes_are_those_of_the_given_gpus(tmp_path, monkeypatch):
    make_device_nodes(tmp_path / "dev")
    gpus = machine_gpus(fake_nvml(2, monkeypatch))
    nodes = dict((inside, host) for host, inside in device_nodes(gpus[1:], tmp_path / "dev"))
    assert set(nodes) == {"/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm"}
    assert nodes["/dev/nvidia1"] == str(tmp_path / "dev" / "nvidia1")


@pytest.mark.sandbox
@pytest.mark.parametrize("given", [True, False], ids=["given-gpus", "no-gpus"])
def test_device_nodes_appear_in_the_sandbox_only_when_given(tmp_path, monkeypatch, given):
    from test_sandbox import SETTINGS, attempt, make_ring, start

    from ringflow.sandbox.interpreter import describe_interpreter
    from ringflow.sandbox.probe import require_sandbox

    make_device_nodes(tmp_path / "dev")
    gpus = machine_gpus(fake_nvml(2, monkeypatch))
    ring = make_ring(tmp_path / "ring", describe_interpreter(sys.executable))
    devices = tuple(device_nodes(gpus[:1], tmp_path / "dev")) if given else ()
    info = require_sandbox(SETTINGS)
    plan = start(ring, info, ring.request(gpu_devices=devices))
    try:
        (listing,) = attempt(plan, [("list", "/dev")])
    finally:
        plan.finish()
    nvidia = {name for name in listing["value"] if name.startswith("nvidia")}
    assert nvidia == ({"nvidia0", "nvidiactl", "nvidia-uvm"} if given else set())
