"""GPUs for executions (docs/operations.md#gpus-and-slurm): slots, device nodes, UUIDs, all on a
fake NVML here.

The fake `pynvml` in tests/fake_nvml stands in for the library where no GPU exists; the
`gpu`-marked tests in test_supervisor_gpu.py run the real one where a GPU is present.
"""

from __future__ import annotations

import importlib.util
import json
import os
import stat
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from ringflow.core.errors import DeadlineReached, SandboxError
from ringflow.sandbox.gpus import allocate, device_nodes, gpu_facts, machine_gpus
from ringtools import make_task, results, snakemake, write_config

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


GPU_PROGRAM = """\
import json, os, time
start = time.time()
time.sleep(1.5)
with open(os.path.join(os.environ["RINGFLOW_OUTPUT_DIR"], "score.json"), "w") as f:
    json.dump({"value": 0.5}, f)
with open(os.path.join(os.environ["RINGFLOW_OUTPUT_DIR"], "gpu.json"), "w") as f:
    json.dump({"visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "start": start,
               "end": time.time()}, f)
"""


@pytest.mark.e2e
def test_two_executions_at_once_under_the_gpu_profile_get_different_gpus(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", f"{FAKE_DIR}:{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.setenv("RINGFLOW_FAKE_GPUS", "2")
    cands = tmp_path / "cands"
    for name in ("a", "b", "c"):
        (cands / name).mkdir(parents=True)
        (cands / name / "run.py").write_text(GPU_PROGRAM)
    config = write_config(
        tmp_path,
        ring_id="gpus",
        task=str(make_task(tmp_path)),
        candidates=str(cands),
        baseline=None,
        promote_top_k=0,
        guard={"enabled": False, "seeds": 2, "alpha": 0.05, "margin": 0.0},
    )
    gpu_profile = Path(__file__).resolve().parents[3] / "profiles" / "gpu"
    snakemake(tmp_path, config, "--profile", str(gpu_profile), "--cores", "4")
    ring = tmp_path / "runs" / "gpus"
    lock = json.loads((ring / "RING.json").read_text())
    assert lock["gpu"]["gpus"] == ["Fake GPU"]
    runs = []
    for key, result in results(ring).items():
        assert result["status"] == "ok", result
        folder = ring / "nodes" / key[0] / "exec" / key[1] / key[2]
        runs.append(json.loads((folder / "output" / "gpu.json").read_text()))
        assert [g["uuid"] for g in result["gpus"]] == [runs[-1]["visible"]]
    assert {r["visible"] for r in runs} <= {"GPU-fake-0", "GPU-fake-1"}
    overlapping = [
        (x, y) for i, x in enumerate(runs) for y in runs[i + 1 :]
        if x["start"] < y["end"] and y["start"] < x["end"]
    ]  # fmt: skip
    assert overlapping, "two executions ran at once"
    assert all(x["visible"] != y["visible"] for x, y in overlapping)
