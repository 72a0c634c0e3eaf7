"""A ring under Snakemake's SLURM executor (docs/slurm.md): which rules run on the driver,
what the executions ask SLURM for beyond threads, memory and time (GPUs, a nice value
that carries their priority), and the jobs' name and log folder.

The executor is known only once the workflow runs (never while the Snakefile is read), so
everything here is a function evaluated as jobs are made or as the workflow starts."""

from __future__ import annotations

import sys
from pathlib import Path

from ..cluster.slurm import job_prefix
from ..cluster.target import SlurmTarget, cluster_slots, write_target
from ..core.errors import InputError
from ..reporting.progress import watch_slurm_queue

# The only rules that become cluster jobs: a program's execution and an engineer session.
# Every other step is bookkeeping that takes a second on the driver; as a SLURM job it
# would cost the submission, the start and the polling (docs/slurm.md#what-runs-where).
CLUSTER_RULES = ("execute", "engineer")

SLURM_EXECUTORS = ("slurm", "slurm-jobstep")

# Snakemake's priorities run from 0 to 2000 (ringflow.workflow.dag); SLURM's nice value
# lowers a job's priority, so the highest Snakemake priority gets the lowest nice value.
NICE_BASE = 3000


def driver_rules(names, prefix: str) -> list[str]:
    """The rules of one ring's module (named with the ring's `prefix`) that run on the
    driver: all but CLUSTER_RULES."""
    return sorted(name for name in names if name[len(prefix) :] not in CLUSTER_RULES)


def executor_name(workflow) -> str | None:
    """The running executor's name (`local`, `slurm`, `slurm-jobstep`, …), None before the
    workflow runs (while the Snakefile is read, in a dry run's parse)."""
    plugin = getattr(workflow, "executor_plugin", None)
    return getattr(plugin, "name", None) if plugin is not None else None


def on_slurm(workflow) -> bool:
    """Whether jobs go to SLURM (on the driver) or run inside a SLURM job (on a node)."""
    return executor_name(workflow) in SLURM_EXECUTORS


def gpu_profile(workflow) -> bool:
    """Whether the profile declares the `gpu` resource (profiles/gpu, a SLURM GPU profile).
    Snakemake's resources answer `.get` of an undeclared name with an empty resource."""
    return "gpu" in set(getattr(workflow, "global_resources", None) or {})


def execution_gpus(workflow, gpus_per_execution: int, local_gpus: int) -> int:
    """GPUs one execution asks for. On SLURM: `gpus_per_execution` where the profile
    declares the `gpu` resource (the plugin turns it into `--gpus`), 0 otherwise, whatever
    the driver's own machine has; elsewhere what the local GPU slots allow (`local_gpus`)."""
    if on_slurm(workflow):
        return int(gpus_per_execution) if gpu_profile(workflow) else 0
    return local_gpus


def slurm_nice(priority: int) -> str:
    """The `slurm_extra` that hands a job's Snakemake priority to SLURM: a higher priority
    is a lower nice value, so SLURM starts the baseline's first run before an ablation."""
    return f"--nice={max(0, NICE_BASE - int(priority))}"


def _raw(resources, name: str) -> str | None:
    """A resource as the profile or command line wrote it (before Snakemake evaluates it in
    a rule's context), unquoted; None where unset."""
    if resources is None:
        return None
    try:
        resource = resources.get(name) if hasattr(resources, "get") else None
    except (KeyError, ValueError):
        return None
    raw = getattr(resource, "raw", resource)
    if raw is None:
        return None
    return str(raw).strip().strip("'\"") or None


def slurm_target(workflow, prefix: str = "") -> SlurmTarget:
    """Where this ring's executions go: the execute rule's partition and GPU model (from
    --set-resources, else the default resources), and whether they ask for GPUs."""
    settings = workflow.resource_settings
    overrides = getattr(settings, "overwrite_resources", None) or {}
    execute = overrides.get(f"{prefix}execute") or overrides.get("execute")
    defaults = getattr(settings, "default_resources", None)

    def pick(name: str) -> str | None:
        return _raw(execute, name) or _raw(defaults, name)

    return SlurmTarget(pick("slurm_partition"), pick("gpu_model"), gpu_profile(workflow))


def start_on_slurm(workflow, rings) -> None:
    """onstart: under the SLURM executor, record each unfinished ring's target
    (cluster.json, which the lock checks against the partition) and name the jobs after the
    last ring."""
    if executor_name(workflow) != "slurm" or not rings:
        return
    for ring in rings:
        # A finished ring is immutable: nothing of it runs again, nothing is written to it.
        if not (Path(ring.root) / "stop_manifest.json").exists():
            write_target(ring.root, slurm_target(workflow, ring.prefix))
    name_slurm_jobs(workflow, rings[-1].root.name, rings[-1].root)
    executor = getattr(getattr(workflow, "scheduler", None), "_executor", None)
    if (job_name := getattr(executor, "run_uuid", None)) is not None:
        for ring in rings:
            watch_slurm_queue(ring.root, job_name)


def name_slurm_jobs(workflow, ring_name: str, ring_root: Path) -> dict | None:
    """onstart, on the driver under the SLURM executor: name the jobs after the ring
    (`ringflow-<ring>_<run uuid>`, so `sacct --name` finds them) and keep the jobs' SLURM
    logs under the ring's folder (`logs/slurm/<rule>/<wildcards>/<job id>.log`), unless the
    profile or the command line set a prefix or a log folder itself.

    The plugin reads both settings as it starts, before the workflow's onstart; the job
    name and log folder it uses for each submission are its `run_uuid` and `slurm_logdir`,
    set here. Returns what was set, None where the executor is not SLURM's."""
    if executor_name(workflow) != "slurm":
        return None
    executor = getattr(getattr(workflow, "scheduler", None), "_executor", None)
    settings = getattr(workflow, "executor_settings", None)
    if executor is None or settings is None or not hasattr(executor, "run_uuid"):
        return None
    done = {}
    if not getattr(settings, "jobname_prefix", None):
        prefix = job_prefix(ring_name)
        executor.run_uuid = f"{prefix}_{executor.run_uuid}"
        done["jobname_prefix"] = prefix
    if getattr(settings, "logdir", None) is None and hasattr(executor, "slurm_logdir"):
        logdir = Path(ring_root).resolve() / "logs" / "slurm"
        executor.slurm_logdir = logdir
        done["logdir"] = str(logdir)
    if done:
        print(f"ringflow: SLURM jobs are named {executor.run_uuid}; their logs go to "
              f"{executor.slurm_logdir}", flush=True)  # fmt: skip
    return done


def slots_on_slurm(workflow, prefix: str, config: dict) -> int | None:
    """onstart, on the driver under the SLURM executor: the ring's executions its target
    partition holds at once, which the reserve counts beside the profile's `jobs`; None
    elsewhere, or where SLURM does not answer (the profile's `jobs` count alone then)."""
    if executor_name(workflow) != "slurm":
        return None
    try:
        return cluster_slots(config, slurm_target(workflow, prefix))
    except InputError as exc:
        print(f"ringflow: the reserve counts the profile's jobs alone: {exc}", file=sys.stderr)
        return None
