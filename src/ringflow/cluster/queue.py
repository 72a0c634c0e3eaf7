"""The ring's jobs waiting in SLURM's queue, for the progress line (docs/slurm.md#pending-jobs).

A job SLURM cannot start yet says why (`Resources`, `Priority`, `QOSMaxJobsPerUserLimit`,
`PartitionConfig`, …) only to whoever asks `squeue`; Snakemake shows nothing while it
waits. The driver asks for its own run's jobs by their common name (the plugin names every
job of a run alike), and only to list them: nothing is cancelled here.
"""

from __future__ import annotations

import subprocess
import time

from ..core.frozen import Frozen, frozen_record

SQUEUE_FORMAT = "%i|%r|%V"
QUERY_TIMEOUT_S = 20


@frozen_record
class PendingJob(Frozen):
    job_id: str
    reason: str
    submitted_at: float | None  # epoch seconds; None where squeue gave no time


def epoch(text: str) -> float | None:
    """SLURM's `2026-12-03T23:50:01` (the controller's local time) as epoch seconds."""
    try:
        return time.mktime(time.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def parse_pending(text: str) -> list[PendingJob]:
    """`squeue -h -t PENDING -o "%i|%r|%V"` output, one job per line."""
    jobs = []
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 3 or not parts[0]:
            continue
        jobs.append(PendingJob(parts[0], parts[1] or "None", epoch(parts[2])))
    return jobs


def pending_jobs(job_name: str) -> list[PendingJob] | None:
    """This run's jobs SLURM has not started; None where squeue gives no answer (the
    progress line then says nothing of the queue rather than something wrong)."""
    try:
        done = subprocess.run(
            ["squeue", "-h", "-t", "PENDING", f"--name={job_name}", "-o", SQUEUE_FORMAT],
            capture_output=True, text=True, timeout=QUERY_TIMEOUT_S, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return parse_pending(done.stdout)


def pending_note(jobs: list[PendingJob], now: float, warn_min: float) -> tuple[tuple, str] | None:
    """What the progress line says of jobs pending longer than `warn_min` minutes, with
    SLURM's reasons, the commonest first, and a key that changes only when the jobs or
    reasons do (not as the wait grows); None when none has waited that long."""
    if warn_min <= 0:
        return None
    waits = [
        (now - job.submitted_at, job)
        for job in jobs
        if job.submitted_at is not None and now - job.submitted_at >= warn_min * 60
    ]
    if not waits:
        return None
    reasons: dict[str, int] = {}
    for _wait, job in waits:
        reasons[job.reason] = reasons.get(job.reason, 0) + 1
    why = ", ".join(
        f"{reason} {count}" if len(reasons) > 1 else reason
        for reason, count in sorted(reasons.items(), key=lambda item: (-item[1], item[0]))
    )
    longest = max(wait for wait, _job in waits)
    minutes = int(longest // 60)
    count = len(waits)
    key = (count, tuple(sorted(reasons.items())))
    return key, (
        f"{count} SLURM job{'s' if count != 1 else ''} pending over {warn_min:g} min "
        f"(longest {minutes}m{int(longest % 60):02d}s; SLURM says: {why})"
    )
