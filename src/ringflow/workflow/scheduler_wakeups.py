"""One pending wake-up for Snakemake's scheduler (docs/architecture.md#the-drivers-scheduler).

Snakemake's job scheduler runs a round (finish jobs, look at every ready job's inputs,
select what to start) each time its semaphore is released: when a job ends, and from a
timer that the job rate limiter (`--max-jobs-per-timespan`, 100 per second by default)
arms at the end of every round. Every round arms a timer and every timer causes a round,
so each job's end starts a chain of one round per second that lasts until the workflow
ends: after k jobs, k rounds a second. Measured on 200 do-nothing executions, 3,700
rounds; each stats the inputs of every ready job, so the driver spent more CPU choosing
jobs than the jobs spent running, on the cores the jobs needed.

The running scheduler (never Snakemake's class) keeps at most one timer pending: the
limiter still gets its wake-up within one timespan of any round, which is all it needs to
start what it held back. The timer is a daemon thread, so the driver's exit never waits
for it.
"""

from __future__ import annotations

import threading


def one_pending_wakeup(scheduler) -> bool:
    """Give `scheduler` a re-evaluation that arms a timer only when none is pending;
    returns whether the scheduler has the method and semaphore this relies on."""
    semaphore = getattr(scheduler, "_open_jobs", None)
    if not callable(getattr(scheduler, "_schedule_reevalutation", None)) or not hasattr(
        semaphore, "release"
    ):
        return False
    guard = threading.Lock()
    pending = []

    def wake() -> None:
        with guard:
            pending.clear()
        semaphore.release()

    def schedule_reevaluation(delay: float) -> None:
        with guard:
            if pending:
                return
            timer = threading.Timer(delay, wake)
            timer.daemon = True
            pending.append(timer)
        timer.start()

    scheduler._schedule_reevalutation = schedule_reevaluation
    return True
