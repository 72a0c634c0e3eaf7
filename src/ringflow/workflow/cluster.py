"""A ring under Snakemake's SLURM executor (docs/slurm.md): which rules run on the driver,
what the executions ask SLURM for beyond threads, memory and time (GPUs, a nice value
that carries their priority), and the jobs' name and log folder.

The executor is known only once the workflow runs (never while the Snakefile is read), so
everything here is a function evaluated as jobs are made or as the workflow starts."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from ..cluster.slurm import job_prefix
from ..cluster.target import SlurmTarget, cluster_slots, write_target
from ..core.errors import InputError
from ..core.layout import RingLayout
from ..reporting.progress import watch_slurm_queue
from .direct_jobs import run_steps_in_their_jobs
from .preemption import report_preempted
from .status_polls import poll_sooner, status_poll_max_s

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
    """GPUs one execution asks for. On SLURM's driver: `gpus_per_execution` where the
    profile declares the `gpu` resource (the plugin turns it into `--gpus`), 0 otherwise,
    whatever the driver's own machine has; the job runs the step with that figure
    (workflow/direct_jobs.py). Inside a job that keeps the plugin's command (Snakemake
    starts again there, without the profile's resources): the GPUs SLURM allocated to the
    job. Elsewhere what the local GPU slots allow (`local_gpus`)."""
    if executor_name(workflow) == "slurm":
        return int(gpus_per_execution) if gpu_profile(workflow) else 0
    if getattr(workflow, "remote_exec", False) and "SLURM_JOB_ID" in os.environ:
        return int(os.environ.get("SLURM_GPUS_ON_NODE") or 0)
    return local_gpus


def slurm_nice(priority: int) -> str:
    """The sbatch option that hands a job's Snakemake priority to SLURM: a higher priority
    is a lower nice value, so SLURM starts the baseline's first run before an ablation."""
    return f"--nice={max(0, NICE_BASE - int(priority))}"


def slurm_job_options(priority: int) -> str:
    """The `slurm_extra` of a cluster job (an execution, an engineer session): its priority
    as a nice value, and no requeue. A requeued job starts again under the same id while
    the driver still counts its first run (and that run's working copy stays behind); a
    job that is not requeued ends as PREEMPTED or NODE_FAIL, which the driver records as
    an interrupted execution (docs/slurm.md#job-ids-signals-and-kills)."""
    return f"{slurm_nice(priority)} --no-requeue"


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


def start_on_slurm(workflow, rings, configs: dict | None = None) -> None:
    """onstart: under the SLURM executor, name the jobs after the last ring; for each
    unfinished ring, record its target (cluster.json, which the lock checks against the
    partition), cancel the jobs an earlier driver left, list this run's job name, and record
    the executions SLURM ended while no driver ran."""
    from ..cluster import jobs

    if executor_name(workflow) != "slurm" or not rings:
        return
    name_slurm_jobs(workflow, rings[-1].root.name, rings[-1].root)
    executor = getattr(getattr(workflow, "scheduler", None), "_executor", None)
    job_name = getattr(executor, "run_uuid", None)
    for ring in rings:
        # A finished ring is immutable: nothing of it runs again, nothing is written to it.
        if not RingLayout(Path(ring.root)).stop_manifest.exists():
            write_target(ring.root, slurm_target(workflow, ring.prefix))
            if job_name is not None:
                cancel_left_jobs(ring.root, job_name)
                jobs.record_driver(ring.root, job_name)
            settle_jobs_ended_unheard(ring.root)
    if job_name is not None:
        for ring in rings:
            watch_slurm_queue(ring.root, job_name)
    if executor is not None and hasattr(executor, "report_job_error"):
        poll_sooner(executor, status_poll_max_s(configs))
        report_preempted(executor)
        run_steps_in_their_jobs(executor, workflow)
        DRIVER.started_at = time.time()
        watch_slurm_jobs(executor, rings)
        cancel_on_signals(executor, rings)


# ---- jobs SLURM ended, and the driver's stop (docs/slurm.md#job-ids-signals-and-kills) ---


class _Driver:
    """What the driver's signal handler has done: once it cancels the ring's jobs, the
    CANCELLED jobs it then hears of are its own doing, not SLURM's kills."""

    def __init__(self):
        self.cancelled_by: str | None = None
        self.cancelled: set[str] = set()  # the job ids it cancelled
        self.started_at: float | None = None  # onstart: the jobs listed since are this run's


DRIVER = _Driver()


def _ring_of(job, rings):
    """(ring, rule, wildcards) of an execute or engineer job of one of `rings`, the rule
    without the ring's prefix; else None."""
    rule = getattr(getattr(job, "rule", None), "name", None)
    wildcards = getattr(job, "wildcards", None)
    if rule is None or wildcards is None:
        return None
    for ring in rings:
        for kind in CLUSTER_RULES:
            if rule == f"{ring.prefix}{kind}":
                return ring, kind, wildcards
    return None


def settle_killed_job(job_info, msg, rings):
    """An execute or engineer job the plugin reports failed: where SLURM ended it from
    outside (TIMEOUT, OUT_OF_MEMORY, CANCELLED, NODE_FAIL, PREEMPTED), write its
    execution's record (cluster/jobs.py), or settle its session's node, and return that;
    None for any other failure (the job's own exit), which stays the machinery's
    failure."""
    from ..cluster import jobs

    if DRIVER.cancelled_by is not None:
        return None
    found = _ring_of(job_info.job, rings)
    job = getattr(job_info, "external_jobid", None)
    if found is None or not job:
        return None
    end = jobs.query_ends([str(job)]).get(str(job))
    if end is None and (state := jobs.state_in_message(msg)):
        end = jobs.JobEnd(state)  # no accounting: the state squeue gave the plugin
    if end is None or jobs.kill_status(end.state) is None:
        return None
    ring, kind, wildcards = found
    try:
        node = wildcards["node"]
        where = "" if kind == "engineer" else f" {wildcards['view']}/{wildcards['variant']}"
    except (KeyError, TypeError, AttributeError):
        return None
    if kind == "engineer":
        result = record_session_kill(ring.root, node, str(job), end)
        said = f"{result['reason']}; its node is {result['node_status']}"
    else:
        result = record_kill(ring.root, node, wildcards["view"], wildcards["variant"],
                             str(job), end)  # fmt: skip
        said = f"{result.reason}; recorded {result.status}"
    print(f"ringflow: {node}{where}: {said}, the ring goes on", flush=True)
    return result


def record_session_kill(ring_root, node: str, job: str, end) -> dict:
    """Settle the node of an engineer session SLURM ended (search/session.py) and say so
    in the events; returns the session's record."""
    from ..cluster.jobs import parse_state
    from ..core.ledger import emit_event
    from ..search.session import settle_killed_session

    record = settle_killed_session(ring_root, node, job, end)
    emit_event(ring_root, "slurm_job_killed", node=node, rule="engineer", job=job,
               state=parse_state(end.state), status=record.get("status"),
               reason=record.get("reason"))  # fmt: skip
    return record


def record_kill(ring_root, node: str, view: str, variant: str, job: str, end):
    """Write the record of an execution SLURM ended (result.json, then its score, as the
    execute rule would have) from `end` (cluster.jobs.JobEnd), remove the boxes its run
    left, and say so in the events.
    A record the supervisor finished before the kill stands; one a signal cut short (SLURM's
    SIGTERM) is replaced by SLURM's account."""
    from ..cluster.jobs import killed_result, parse_state
    from ..core.clock import load_node, load_ring
    from ..core.interrupts import stopped_by_signal
    from ..core.layout import RingLayout
    from ..core.ledger import emit_event, ledger_anchor
    from ..core.node_state import ExecutionResult, result_if_any, write_result
    from ..ring.boxes import remove_abandoned_boxes
    from ..scoring import score_execution

    layout = RingLayout(Path(ring_root))
    path = layout.result(node, view, variant)
    previous = result_if_any(path)  # None too where the job died writing it
    if previous is not None and not stopped_by_signal(previous):
        result = previous
    else:
        spec = load_node(load_ring(ring_root), node).spec(view, variant) or {}
        record = killed_result(spec, node, view, variant, job, end,
                               None if previous is None else previous.to_record())  # fmt: skip
        record["ended_at"] = time.time()
        record["ledger_head"] = ledger_anchor(layout.ledger)
        result = ExecutionResult.from_record(record, source=path)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_result(layout.root, path, result)
        layout.score(node, view, variant).unlink(missing_ok=True)
    if not layout.score(node, view, variant).exists():
        score_execution(layout.root, node, view, variant)
    remove_abandoned_boxes(layout.root)
    emit_event(layout.root, "slurm_job_killed", node=node, view=view, variant=variant, job=job,
               state=parse_state(end.state), status=str(result.status),
               reason=result.reason)  # fmt: skip
    return result


# How long a new driver waits for the jobs an earlier one left to end once cancelled:
# SLURM's KillWait (30 s by default) and the epilog.
LEFT_JOBS_WAIT_S = 120


def cancel_left_jobs(ring_root, job_name: str, wait_s: float = LEFT_JOBS_WAIT_S) -> list[str]:
    """onstart: cancel, by id, the ring's jobs that an earlier driver left in SLURM (it was
    killed, or its machine went down, while they pended or ran), and wait for them to end.
    Left running, each would work on an execution this run submits again. Says so in the
    events (`slurm_jobs_cancelled`), so that their executions run again rather than being
    recorded as SLURM's kills; returns the ids."""
    from ..cluster import jobs
    from ..core.ledger import emit_event

    held = jobs.held_jobs()
    left = jobs.left_jobs(ring_root, job_name, held) if held else []
    if not left:
        return []
    ids, problem = jobs.cancel(left)
    print(f"ringflow: an earlier driver of the ring left {len(ids)} SLURM job(s) pending or "
          f"running: cancelled {' '.join(ids)}" + (f" ({problem})" if problem else "")
          + "; their executions run again", flush=True)  # fmt: skip
    emit_event(ring_root, "slurm_jobs_cancelled", signal=None, reason="left by an earlier driver",
               jobs=ids, problem=problem)  # fmt: skip
    deadline = time.monotonic() + wait_s
    while set(ids) & set(jobs.held_jobs() or {}):
        if time.monotonic() > deadline:
            print(f"ringflow: SLURM still holds job(s) {' '.join(ids)} {wait_s:.0f} s after "
                  "they were cancelled; the ring goes on", flush=True)  # fmt: skip
            break
        time.sleep(1)
    return ids


def settle_jobs_ended_unheard(ring_root) -> list:
    """onstart: record the executions (and settle the engineer sessions' nodes) whose
    SLURM job SLURM ended (TIMEOUT, CANCELLED, …) while no driver was there to hear it
    (killed, or its machine down), as the driver would have; returns their records. The
    last job listed for each execution or session without a record is asked about; the
    jobs a driver cancelled itself (its `slurm_jobs_cancelled` events) are left out, so
    their executions and sessions run again."""
    from ..cluster import jobs
    from ..core.jsonio import read_jsonl_objects

    layout = RingLayout(Path(ring_root))
    if not layout.ring_json.exists():
        return []
    last = {
        (j.get("rule"), j["node"], j["view"], j["variant"]): j
        for j in jobs.unfinished_jobs(ring_root)
    }
    cancelled = {
        str(job)
        for event in read_jsonl_objects(layout.events)
        if event.get("kind") == "slurm_jobs_cancelled"
        for job in event.get("jobs") or []
    }
    asked = [j for j in last.values() if str(j["job"]) not in cancelled]
    ends = jobs.query_ends([str(j["job"]) for j in asked]) if asked else {}
    settled = []
    for item in asked:
        end = ends.get(str(item["job"]))
        if end is None or jobs.kill_status(end.state) is None:
            continue  # still running, or ended by its own exit: Snakemake decides
        if jobs.is_session(item):
            session = record_session_kill(ring_root, item["node"], str(item["job"]), end)
            print(f"ringflow: {item['node']}: {session['reason']} while no driver ran; its "
                  f"node is {session['node_status']}", flush=True)  # fmt: skip
            settled.append(session)
            continue
        result = record_kill(ring_root, item["node"], item["view"], item["variant"],
                             str(item["job"]), end)  # fmt: skip
        print(f"ringflow: {item['node']} {item['view']}/{item['variant']}: {result.reason} "
              f"while no driver ran; recorded {result.status}", flush=True)  # fmt: skip
        settled.append(result)
    return settled


def watch_slurm_jobs(executor, rings) -> None:
    """An execute job SLURM ended is recorded and reported done, so the ring goes on; the
    executor plugin would report it failed and stop the ring. Every other failure is
    reported as the plugin says."""
    report_error = executor.report_job_error

    def report_job_error(job_info, msg=None, **kwargs):
        try:
            settled = settle_killed_job(job_info, msg, rings)
        except Exception as exc:  # the plugin's own report still follows
            print(f"ringflow: could not record SLURM's end of job "
                  f"{getattr(job_info, 'external_jobid', '?')}: {exc}", flush=True)  # fmt: skip
            settled = None
        if settled is not None:
            executor.report_job_success(job_info)
            return None
        return report_error(job_info, msg=msg, **kwargs)

    executor.report_job_error = report_job_error


def ring_job_ids(executor, rings) -> set[str]:
    """This run's jobs of the rings, by id: the ones the plugin tracks, the ones SLURM
    still holds under this run's job name (the plugin may be between two polls), and the
    ones the rings' executions listed since this run started, without a record yet."""
    from ..cluster import jobs

    name = getattr(executor, "run_uuid", None)
    ids = {str(info.external_jobid) for info in list(getattr(executor, "active_jobs", []))
           if getattr(info, "external_jobid", None)}  # fmt: skip
    if name:
        ids.update(jobs.queued_ids(name))
    if DRIVER.started_at is not None:
        for ring in rings:
            listed = jobs.unfinished_jobs(ring.root, DRIVER.started_at)
            ids.update(str(item["job"]) for item in listed)
    return ids


def cancel_ring_jobs(executor, rings, why: str) -> list[str]:
    """`scancel` this run's jobs of the rings by id, pending ones included; never by name
    or user. Says so in each ring's events."""
    from ..cluster import jobs
    from ..core.ledger import emit_event

    ids, problem = jobs.cancel(ring_job_ids(executor, rings) - DRIVER.cancelled)
    DRIVER.cancelled.update(ids)
    if ids:
        print(f"ringflow: {why}: cancelled {len(ids)} SLURM job(s) of the ring: "
              f"{' '.join(ids)}" + (f" ({problem})" if problem else ""), flush=True)  # fmt: skip
        for ring in rings:
            if not RingLayout(Path(ring.root)).stop_manifest.exists():
                emit_event(ring.root, "slurm_jobs_cancelled", signal=why, jobs=ids,
                           problem=problem)  # fmt: skip
    return ids


def cancel_on_signals(executor, rings) -> None:
    """SIGTERM and SIGINT to the driver cancel the ring's SLURM jobs by id at once, then
    stop Snakemake as Ctrl-C does (it cancels what it still tracks and ends). Without this,
    SIGTERM makes Snakemake wait for its running jobs while SLURM starts the pending ones."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        previous = signal.getsignal(signum)

        def handler(sig, frame, previous=previous):
            first = DRIVER.cancelled_by is None
            name = signal.Signals(sig).name
            if first:
                DRIVER.cancelled_by = name
            cancel_ring_jobs(executor, rings, name)
            if not first:
                return
            if callable(previous):
                previous(sig, frame)  # the relay (workflow/relay.py), Snakemake's own
            raise KeyboardInterrupt

        try:
            signal.signal(signum, handler)
        except ValueError:  # not the main thread
            return


def end_on_slurm(workflow, rings) -> None:
    """onerror: after a signal, cancel the jobs of the ring submitted while the driver was
    stopping (by id, as the signal did)."""
    if executor_name(workflow) != "slurm" or DRIVER.cancelled_by is None or not rings:
        return
    executor = getattr(getattr(workflow, "scheduler", None), "_executor", None)
    if executor is not None:
        cancel_ring_jobs(executor, rings, f"{DRIVER.cancelled_by}, as the driver ends")


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
