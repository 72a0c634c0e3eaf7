"""A GPU profile on a machine without a usable GPU is refused at the lock, with NVML's
reason and the two ways out, instead of running on the CPU as if it had GPUs."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from snakemake.resources import Resource, Resources

from ringflow.core.errors import InputError
from ringflow.ring.lock import lock_ring
from ringflow.sandbox.slots import gpu_declared, gpu_slots
from ringflow.selection.timekeeper import record_slots
from ringtools import scripted_config

FAKE_DIR = Path(__file__).resolve().parents[2] / "fake_nvml"


def _workflow(gpu=None):
    resources = Resources({"_cores": Resource("_cores", 2)})
    if gpu is not None:
        resources["gpu"] = gpu
    return SimpleNamespace(global_resources=resources)


def test_only_a_declared_gpu_resource_counts_as_a_gpu_profile():
    # Snakemake answers .get("gpu") of an undeclared resource with an empty resource.
    assert _workflow().global_resources.get("gpu") is not None
    assert not gpu_declared(_workflow().global_resources)
    assert gpu_slots(_workflow().global_resources) == 0
    assert gpu_declared(_workflow(gpu=1).global_resources)


def test_a_gpu_profile_without_gpus_is_refused_at_the_lock(tmp_path):
    config = scripted_config(tmp_path, "nogpu", gpus_per_execution=1)
    ring = tmp_path / "runs" / "nogpu"
    record_slots(ring, _workflow(gpu=1), 0, 1, gpu_profile=True)
    with pytest.raises(InputError) as refused:
        lock_ring(config, tmp_path)
    said = str(refused.value)
    assert "asks for GPUs" in said and "this machine has none (" in said
    assert "--config gpus_per_execution=0" in said and "--profile profiles/local" in said
    assert not (ring / "RING.json").exists()


def test_the_ways_out_lock_the_ring(tmp_path):
    ring = tmp_path / "runs" / "cpu"
    record_slots(ring, _workflow(gpu=1), 0, 1, gpu_profile=True)
    assert lock_ring(scripted_config(tmp_path, "cpu", gpus_per_execution=0), tmp_path)
    local = tmp_path / "runs" / "local"
    record_slots(local, _workflow(), None, 1, gpu_profile=False)
    assert lock_ring(scripted_config(tmp_path, "local", gpus_per_execution=1), tmp_path)
