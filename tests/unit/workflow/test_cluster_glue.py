"""The workflow under SLURM (docs/slurm.md): which rules run on the driver, what executions
ask for beyond threads, memory and time, and what the driver and a profile say of the
partition, without a controller."""

from __future__ import annotations

import sys
from types import SimpleNamespace

from ringflow.cluster.target import SlurmTarget, profile_target, read_target, write_target
from ringflow.workflow.cluster import (
    driver_rules,
    execution_gpus,
    job_prefix,
    slurm_job_options,
    slurm_nice,
    slurm_target,
)


def fake_workflow(executor: str | None, resources=(), defaults=None, overrides=None,
                  remote: bool = False):  # fmt: skip
    plugin = None if executor is None else SimpleNamespace(name=executor)
    settings = SimpleNamespace(default_resources=defaults, overwrite_resources=overrides or {})
    return SimpleNamespace(
        executor_plugin=plugin,
        remote_exec=remote,
        global_resources={name: 1 for name in resources},
        resource_settings=settings,
    )


def test_only_executions_and_sessions_leave_the_driver():
    names = {"ring2_execute", "ring2_engineer", "ring2_lock_ring", "ring2_decide", "ring2_search"}
    assert driver_rules(names, "ring2_") == ["ring2_decide", "ring2_lock_ring", "ring2_search"]
    assert driver_rules({"execute", "weights_key", "engineer"}, "") == ["weights_key"]


def test_priority_becomes_a_nice_value_highest_first():
    assert slurm_nice(100) == "--nice=2900"
    assert slurm_nice(10) == "--nice=2990"
    assert slurm_nice(2000) == "--nice=1000"
    assert slurm_nice(5000) == "--nice=0"


def test_cluster_jobs_are_never_requeued_under_the_same_id():
    assert slurm_job_options(100).split() == ["--nice=2900", "--no-requeue"]
    assert slurm_job_options(0).split() == ["--nice=3000", "--no-requeue"]


def test_job_names_carry_the_ring_within_what_the_plugin_allows():
    assert job_prefix("mine") == "ringflow-mine"
    assert job_prefix("a.b c") == "ringflow-a-b-c"
    assert len(job_prefix("x" * 80)) == 50


def test_gpus_on_slurm_follow_the_profile_not_the_driver_machine():
    # No `gpu` resource in the profile: no GPU asked, whatever gpus_per_execution says.
    assert execution_gpus(fake_workflow("slurm"), 1, 0) == 0
    assert execution_gpus(fake_workflow("slurm", ["gpu"]), 2, 0) == 2
    # Elsewhere: the local GPU slots decide (ringflow.workflow.dag).
    assert execution_gpus(fake_workflow("local", ["gpu"]), 2, 1) == 1
    assert execution_gpus(fake_workflow(None), 2, 0) == 0


def test_inside_a_slurm_job_an_execution_takes_the_gpus_of_its_allocation(monkeypatch):
    # Snakemake starts again inside the job (the job step, then the rule under srun),
    # without the profile's `gpu` resource: SLURM's allocation is what the job has.
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("SLURM_GPUS_ON_NODE", "2")
    assert execution_gpus(fake_workflow("slurm-jobstep", remote=True), 1, 0) == 2
    assert execution_gpus(fake_workflow("local", remote=True), 1, 0) == 2
    monkeypatch.delenv("SLURM_GPUS_ON_NODE")
    assert execution_gpus(fake_workflow("slurm-jobstep", remote=True), 1, 0) == 0
    # A driver run inside an interactive allocation keeps its own rule.
    monkeypatch.setenv("SLURM_GPUS_ON_NODE", "2")
    assert execution_gpus(fake_workflow("local", ["gpu"]), 2, 1) == 1
    assert execution_gpus(fake_workflow("slurm", ["gpu"]), 1, 0) == 1


def test_the_driver_finds_the_execute_rules_partition():
    defaults = {"slurm_partition": SimpleNamespace(raw="debug")}
    overrides = {"ring2_execute": {"slurm_partition": SimpleNamespace(raw="'gpu'"),
                                   "gpu_model": SimpleNamespace(raw="a100")}}  # fmt: skip
    workflow = fake_workflow("slurm", ["gpu"], defaults, overrides)
    assert slurm_target(workflow, "ring2_") == SlurmTarget("gpu", "a100", True)
    assert slurm_target(workflow, "") == SlurmTarget("debug", None, True)
    assert slurm_target(fake_workflow("slurm"), "") == SlurmTarget(None, None, False)


def test_the_target_record_round_trips(tmp_path):
    assert read_target(tmp_path) is None
    write_target(tmp_path, SlurmTarget("debug", None, False))
    assert read_target(tmp_path) == SlurmTarget("debug", None, False)


def test_a_profile_says_where_executions_go(tmp_path):
    (tmp_path / "config.yaml").write_text(
        "executor: slurm\n"
        "resources: [gpu=8]\n"
        "default-resources: {slurm_partition: debug, slurm_account: research}\n"
        "set-resources: {execute: {slurm_partition: gpu, gpu_model: a100}}\n"
    )
    assert profile_target(tmp_path) == SlurmTarget("gpu", "a100", True)
    (tmp_path / "config.yaml").write_text("cores: all\n")
    assert profile_target(tmp_path) is None


def test_the_driver_records_the_target_of_unfinished_rings_only(tmp_path):
    from ringflow.workflow.cluster import start_on_slurm

    def ring(name: str):
        return SimpleNamespace(root=tmp_path / name, prefix="" if name == "one" else f"{name}_")

    (tmp_path / "done").mkdir()
    (tmp_path / "done" / "stop_manifest.json").write_text("{}")
    defaults = {"slurm_partition": SimpleNamespace(raw="debug")}
    workflow = fake_workflow("slurm", defaults=defaults)
    start_on_slurm(workflow, [ring("done"), ring("one")])
    assert not (tmp_path / "done" / "cluster.json").exists()
    assert read_target(tmp_path / "one") == SlurmTarget("debug", None, False)
    # Under another executor nothing is written.
    start_on_slurm(fake_workflow("local"), [ring("two")])
    assert not (tmp_path / "two").exists()


def test_a_cluster_driver_keeps_the_profiles_gpu_slots_whatever_gpus_it_has(monkeypatch):
    # The driver's machine has 2 GPUs (the fake NVML); a SLURM profile declares 16.
    from snakemake.resources import Resource, Resources
    from test_gpus import fake_nvml

    from ringflow.supervisor import gpu
    from ringflow.workflow.hooks import gpu_slots_here

    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(2, monkeypatch))
    monkeypatch.setattr(gpu, "_default", None)

    def profile(non_local: bool):
        resources = Resources({"_cores": Resource("_cores", 2), "gpu": Resource("gpu", 16)})
        return SimpleNamespace(global_resources=resources, non_local_exec=non_local)

    cluster = profile(non_local=True)
    assert gpu_slots_here(cluster) == (False, None)
    assert cluster.global_resources["gpu"].value == 16
    # On one machine the same profile gets one slot per GPU NVML sees.
    here = profile(non_local=False)
    assert gpu_slots_here(here) == (True, 2)
    assert here.global_resources["gpu"].value == 2
