"""A ring's SLURM jobs (docs/slurm.md#job-ids-signals-and-kills): each execution's job id on
record, the ring's own jobs found by id when the driver is stopped, and the record of an
execution SLURM ended before its supervisor could write one (written by the driver,
ringflow.workflow.cluster).

An execution that starts inside a SLURM job appends its job id to the ring's list
(`RingLayout.cluster_jobs`) and keeps it in its result.json (`slurm_job_id`). SLURM can end
a job from outside (its time limit, its memory limit, `scancel`, a failed node,
preemption), and sends SIGKILL `KillWait` seconds after SIGTERM: the supervisor inside may
die before it writes anything. The driver then writes the record from SLURM's own account
of the job (`sacct`), as the supervisor would have, and the ring goes on. Parsing is
separate from querying, so the mapping is tested on recorded `sacct` output."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from ..core import statuses
from ..core.frozen import Frozen, frozen_record
from ..core.jsonio import append_jsonl, read_jsonl_objects
from ..core.layout import RingLayout
from ..core.node_state import starting_record
from .queue import epoch

JOB_ENV = "SLURM_JOB_ID"
QUERY_TIMEOUT_S = 20

# SLURM's end states of a job it ended from outside, and how the execution is recorded:
# interrupted (no fault of the program's), or a crash where the job met SLURM's memory
# limit (the program's own use).
KILL_STATUSES = {
    "TIMEOUT": statuses.INTERRUPTED,
    "CANCELLED": statuses.INTERRUPTED,
    "NODE_FAIL": statuses.INTERRUPTED,
    "PREEMPTED": statuses.INTERRUPTED,
    "OUT_OF_MEMORY": statuses.CRASH,
}

_WHY = {
    "TIMEOUT": "its SLURM time limit (the {rule} rule's runtime) ran out",
    "CANCELLED": "it was cancelled (scancel or an administrator)",
    "NODE_FAIL": "its node failed",
    "PREEMPTED": "a job of higher priority preempted it",
}

_STATUS_IN_MESSAGE = re.compile(r"SLURM status is: '([A-Z_]+)'")


@frozen_record
class JobEnd(Frozen):
    """How SLURM says a job ended (`sacct -o State,ExitCode,Reason`)."""

    state: str  # "CANCELLED by 0" is CANCELLED
    exit_code: str = ""
    reason: str = ""


def current_job_id(env=None) -> str | None:
    """The SLURM job this process runs in, None outside SLURM."""
    job = (os.environ if env is None else env).get(JOB_ENV, "").strip()
    return job or None


def record_job(ring_root, node: str, view: str | None, variant: str | None, env=None,
               rule: str = "execute") -> str | None:  # fmt: skip
    """Append this execution's SLURM job (or this engineer session's: `rule` "engineer",
    no view or variant) to the ring's list (one whole line, appended at once); returns the
    job id, None (and nothing written) outside SLURM."""
    env = os.environ if env is None else env
    job = current_job_id(env)
    if job is None:
        return None
    line = {
        "job": job,
        "rule": rule,
        "node": node,
        "view": view,
        "variant": variant,
        "host": os.uname().nodename,
        "at": time.time(),
    }
    append_jsonl(RingLayout(Path(ring_root)).cluster_jobs, line)
    return job


def is_session(item: dict) -> bool:
    """Whether a line of the job list is an engineer session's (lines written before the
    list named rules are executions')."""
    return item.get("rule") == "engineer"


def ring_jobs(ring_root) -> list[dict]:
    """Every line of the ring's job list (a torn last line is skipped)."""
    items = read_jsonl_objects(RingLayout(Path(ring_root)).cluster_jobs)
    return [item for item in items if item.get("job")]


def record_driver(ring_root, job_name: str) -> None:
    """Append this driver run's job name to the ring's list (one whole line at once)."""
    line = {"job_name": job_name, "host": os.uname().nodename, "pid": os.getpid(),
            "at": time.time()}  # fmt: skip
    append_jsonl(RingLayout(Path(ring_root)).cluster_drivers, line)


def driver_job_names(ring_root) -> set[str]:
    """The job names of every driver run that submitted the ring's jobs."""
    items = read_jsonl_objects(RingLayout(Path(ring_root)).cluster_drivers)
    return {str(item["job_name"]) for item in items if item.get("job_name")}


def unfinished_jobs(ring_root, since: float | None = None) -> list[dict]:
    """The listed jobs (started at `since` or later, where given: one driver's) whose
    execution has no result.json (a session: no session.json): running, or ended without
    a record."""
    layout = RingLayout(Path(ring_root))

    def recorded(item: dict) -> bool:
        if is_session(item):
            return layout.session(item["node"]).exists()
        return layout.result(item["node"], item["view"], item["variant"]).exists()

    return [
        item
        for item in ring_jobs(ring_root)
        if (since is None or float(item.get("at") or 0) >= since) and not recorded(item)
    ]


# ---- parsing ------------------------------------------------------------------------------


def parse_state(text: str) -> str:
    """`CANCELLED by 0` → `CANCELLED`, `RUNNING` → `RUNNING`."""
    return (text.strip().split() or [""])[0].rstrip("+").upper()


def parse_sacct(text: str) -> dict[str, JobEnd]:
    """`sacct -X -n -P -j IDS -o JobID,State,ExitCode,Reason`: {job id: its end}. Job steps
    (`123.batch`, `123.0`) are left out; an array task keeps its `123_4` id."""
    ends: dict[str, JobEnd] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = [*line.split("|"), "", "", ""][:4]
        job, state, exit_code, reason = (f.strip() for f in fields)
        if not job or "." in job or not state:
            continue
        ends[job] = JobEnd(parse_state(state), exit_code, "" if reason == "None" else reason)
    return ends


def state_in_message(msg: str | None) -> str | None:
    """The SLURM state in the executor plugin's failure message, where it names one."""
    match = _STATUS_IN_MESSAGE.search(msg or "")
    return match.group(1) if match else None


def kill_status(state: str) -> str | None:
    """The execution status of a job SLURM ended from outside, None for any other state
    (COMPLETED, FAILED: the job's own exit)."""
    return KILL_STATUSES.get(parse_state(state))


def kill_reason(job: str, end: JobEnd, rule: str = "execute") -> str:
    """Why the execution (or the engineer session: `rule`) ended, in SLURM's words (its
    state first)."""
    state = parse_state(end.state)
    if state == "OUT_OF_MEMORY":
        why = (f"memory limit (SLURM's, the job's --mem, fired before ringflow's own "
               f"limits.memory_gb): SLURM ended job {job} with OUT_OF_MEMORY")  # fmt: skip
    else:
        said = _WHY.get(state, "ended by SLURM").format(rule=rule)
        why = f"SLURM ended job {job} with {state}: {said}"
    details = [f"exit code {end.exit_code}" if end.exit_code else "",
               f"reason {end.reason}" if end.reason else ""]  # fmt: skip
    details = [d for d in details if d]
    return why + (f" ({', '.join(details)})" if details else "")


def killed_result(spec: dict, node: str, view: str, variant: str, job: str, end: JobEnd,
                  previous: dict | None = None, now: float | None = None) -> dict:  # fmt: skip
    """The result.json of an execution SLURM ended, with the keys of the supervisor's own
    interrupted record (ringflow.execute); what a record written before the kill (a
    signal's) already says of the run is kept."""
    now = time.time() if now is None else now
    state = parse_state(end.state)
    result = starting_record(node, view, variant, spec, None)
    if previous:
        result.update(previous)
    event = {"event": "slurm_killed", "job": job, "state": state, "at": now,
             "exit_code": end.exit_code or None, "reason": end.reason or None}  # fmt: skip
    result.update(
        status=KILL_STATUSES.get(state, statuses.INTERRUPTED),
        budget_cut=False,
        reason=kill_reason(job, end),
        slurm_job_id=job,
        slurm_state=state,
        events=[*(result.get("events") or []), event],
    )
    return result


# ---- querying -----------------------------------------------------------------------------


def _sacct(jobs: list[str], fields: str) -> str | None:
    """`sacct -X -n -P -j IDS -o FIELDS`; None where sacct is missing or fails."""
    if not jobs or shutil.which("sacct") is None:
        return None
    argv = ["sacct", "-X", "-n", "-P", "-j", ",".join(jobs), "-o", fields]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=QUERY_TIMEOUT_S,
                              check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def query_ends(jobs: list[str]) -> dict[str, JobEnd]:
    """SLURM's account of each job (sacct); {} where sacct is missing or fails."""
    text = _sacct(jobs, "JobID,State,ExitCode,Reason")
    return {} if text is None else parse_sacct(text)


def parse_states(text: str) -> dict[str, str]:
    """`squeue -h -o %i|%T` output: {job id: its state}."""
    states = {}
    for line in text.splitlines():
        job, state = [*line.strip().split("|"), ""][:2]
        if job and state:
            states[job] = parse_state(state)
    return states


def query_states(jobs: list[str]) -> dict[str, str]:
    """The state of each job SLURM still lists (squeue keeps an ended job for MinJobAge),
    else its state in the accounting (sacct); {} for the ids neither knows."""
    states: dict[str, str] = {}
    if jobs and shutil.which("squeue") is not None:
        argv = ["squeue", "-h", "-j", ",".join(jobs), "-o", "%i|%T"]
        try:
            done = subprocess.run(argv, capture_output=True, text=True,
                                  timeout=QUERY_TIMEOUT_S, check=False)  # fmt: skip
        except (OSError, subprocess.TimeoutExpired):
            done = None
        if done is not None and done.returncode == 0:
            states.update(parse_states(done.stdout))
    unlisted = [job for job in jobs if job not in states]
    states.update({job: end.state for job, end in query_ends(unlisted).items()})
    return states


# SLURM states of a job not yet ended (squeue keeps ended ones a while, MinJobAge).
LIVE_STATES = frozenset({
    "PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED",
    "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED",
})  # fmt: skip


def parse_held(text: str) -> dict[str, str]:
    """`squeue -h -o %i|%j|%T` output: {job id: job name} of the jobs not yet ended."""
    held = {}
    for line in text.splitlines():
        job, name, state = [*line.strip().split("|"), "", ""][:3]
        if job and parse_state(state) in LIVE_STATES:
            held[job] = name
    return held


def held_jobs() -> dict[str, str] | None:
    """This user's jobs SLURM holds and has not ended: {job id: job name}; None where
    squeue is missing or fails."""
    if shutil.which("squeue") is None:
        return None
    argv = ["squeue", "--me", "-h", "-o", "%i|%j|%T"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=QUERY_TIMEOUT_S,
                              check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_held(done.stdout) if done.returncode == 0 else None


def left_jobs(ring_root, job_name: str, held: dict[str, str]) -> list[str]:
    """The ring's jobs that earlier driver runs left in SLURM (`held`, from held_jobs):
    those under an earlier run's job name (pending ones too), and those an execution
    listed without a record yet; never this run's (`job_name`)."""
    names = driver_job_names(ring_root) - {job_name}
    listed = {str(item["job"]) for item in unfinished_jobs(ring_root)}
    left = {job for job, name in held.items() if name != job_name and
            (name in names or job in listed)}  # fmt: skip
    return sorted(left, key=lambda j: (len(j), j))


def queued_ids(job_name: str) -> list[str]:
    """The ids of this user's jobs named `job_name` that SLURM still holds (pending,
    running or completing): a way to list a run's jobs, never to cancel by name."""
    if not job_name or shutil.which("squeue") is None:
        return []
    argv = ["squeue", "--me", "-h", "--name", job_name, "-o", "%i"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=QUERY_TIMEOUT_S,
                              check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def cancel(jobs) -> tuple[list[str], str | None]:
    """`scancel` the jobs by id: (the ids, scancel's complaint or None)."""
    ids = sorted({str(j) for j in jobs if j}, key=lambda j: (len(j), j))
    if not ids:
        return [], None
    try:
        done = subprocess.run(["scancel", *ids], capture_output=True, text=True,
                              timeout=QUERY_TIMEOUT_S, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return ids, str(exc)
    return ids, (done.stderr.strip() or None) if done.returncode else None


# ---- what a job costs beyond its execution ------------------------------------------------


@frozen_record
class JobTimes(Frozen):
    """When SLURM took a job, started it and saw it end (epoch seconds; None: not yet)."""

    submitted: float | None
    started: float | None
    ended: float | None


def parse_job_times(text: str) -> dict[str, JobTimes]:
    """`sacct -X -n -P -j IDS -o JobID,Submit,Start,End`: {job id: its times}."""
    times: dict[str, JobTimes] = {}
    for line in text.splitlines():
        fields = [*line.split("|"), "", "", ""][:4]
        job = fields[0].strip()
        if not job or "." in job:
            continue
        times[job] = JobTimes(*(epoch(f) for f in fields[1:4]))
    return times


def query_job_times(jobs: list[str]) -> dict[str, JobTimes]:
    """SLURM's times of each job (sacct); {} where sacct is missing or fails."""
    text = _sacct(jobs, "JobID,Submit,Start,End")
    return {} if text is None else parse_job_times(text)


def job_overhead_s(times: dict[str, JobTimes], executions: dict[str, float]) -> float | None:
    """What one execution costs as a SLURM job beyond its own run: the job's life around
    the execution (the step's start; Snakemake's two where a job keeps the plugin's
    command, docs/slurm.md#what-a-job-runs) at its median, plus the
    shortest wait from submission to start (SLURM's scheduling latency; longer waits are
    jobs queued behind the ring's own, which the slots already price). None before a job
    of `executions` ({job id: the execution's seconds}) has ended."""
    from statistics import median  # the driver's estimate only; executions import this module

    around, waits = [], []
    for job, seconds in executions.items():
        t = times.get(job)
        if t is None or None in (t.submitted, t.started, t.ended):
            continue
        around.append(max(0.0, t.ended - t.started - seconds))
        waits.append(max(0.0, t.started - t.submitted))
    if not around:
        return None
    return median(around) + min(waits)
