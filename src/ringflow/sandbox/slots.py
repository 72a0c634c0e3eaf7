"""How many GPU slots the workflow schedules: one per GPU of this machine (profiles/gpu)."""

from __future__ import annotations

import os

from ringflow.sandbox.gpus import machine_gpus
from ringflow.supervisor.gpu import parse_visible_devices


def gpu_declared(global_resources) -> bool:
    """Whether the profile declares the `gpu` resource (profiles/gpu). Snakemake's
    resources answer `.get` of an undeclared name with an empty resource, never None."""
    return "gpu" in set(global_resources)


def gpu_slots(global_resources) -> int:
    """Set the `gpu` resource a profile declares to the GPUs there are; 0 when undeclared.

    Inside a SLURM job the job's allocation counts; elsewhere what NVML sees. A profile
    value of 0 or more GPUs than exist is corrected, so one execution runs per GPU.
    """
    if not gpu_declared(global_resources):
        return 0
    declared = global_resources["gpu"]
    visible = parse_visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES"))
    if "SLURM_JOB_ID" in os.environ and visible is not None:
        count = len(visible)
    else:
        count = len(machine_gpus())
    if count:
        global_resources["gpu"] = type(declared)("gpu", count)
    return count
