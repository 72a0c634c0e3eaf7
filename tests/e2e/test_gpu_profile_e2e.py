"""Whole rings under the GPU profile, on the fake NVML of tests/fake_nvml
(docs/operations.md#gpus-and-slurm): a machine without GPUs refuses the profile at the lock,
and executions running at once get different GPUs.

Moved whole from tests/unit/sandbox (test_gpu_profile.py, test_gpus.py); the unit tests of
slots and device nodes stay there.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from ringtools import (
    REPO,
    make_candidate,
    make_task,
    results,
    snakemake,
    snakemake_argv,
    write_config,
)

FAKE_DIR = Path(__file__).resolve().parents[1] / "fake_nvml"


@pytest.mark.e2e
def test_snakemake_with_the_gpu_profile_on_a_machine_without_gpus_refuses(tmp_path):
    make_task(tmp_path)
    make_candidate(tmp_path / "cands" / "a", mean=0.5)
    config = write_config(tmp_path, ring_id="g", task=str(tmp_path / "task"),
                          candidates=str(tmp_path / "cands"), baseline=None)  # fmt: skip
    argv = snakemake_argv(tmp_path, config)
    argv[argv.index(str(REPO / "profiles" / "local"))] = str(REPO / "profiles" / "gpu")
    env = {**os.environ, "PYTHONPATH": f"{FAKE_DIR}:{os.environ.get('PYTHONPATH', '')}",
           "RINGFLOW_FAKE_GPUS": "0"}  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode != 0
    said = done.stdout + done.stderr
    assert "asks for GPUs" in said and "gpus_per_execution=0" in said, said[-3000:]
    ring = tmp_path / "runs" / "g"
    assert not (ring / "RING.json").exists()
    assert json.loads((ring / "slots.json").read_text())["gpus"] == 0
    # The local profile on the same machine locks the ring.
    local = subprocess.run(snakemake_argv(tmp_path, config, "runs/g/RING.json"),
                           capture_output=True, text=True, env=env, timeout=600)  # fmt: skip
    assert local.returncode == 0, local.stderr[-3000:]
    assert (ring / "RING.json").exists()
    assert json.loads((ring / "slots.json").read_text())["gpu_profile"] is False


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
    gpu_profile = REPO / "profiles" / "gpu"
    snakemake(tmp_path, config, "--profile", str(gpu_profile), "--cores", "4")
    ring = tmp_path / "runs" / "gpus"
    lock = json.loads((ring / "RING.json").read_text())
    assert lock["gpu"]["gpus"] == ["Fake GPU"]
    assert_each_run_held_its_own_gpu(ring)


def assert_each_run_held_its_own_gpu(ring: Path) -> dict:
    """Every execution of the ring (GPU_PROGRAM) ran `ok`, saw one stand-in GPU, the one its
    record names, and two that ran at once saw different ones; returns the records."""
    runs, records = [], results(ring)
    for key, result in records.items():
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
    return records
