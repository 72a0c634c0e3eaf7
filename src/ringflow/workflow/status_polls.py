"""When the driver asks SLURM whether its jobs have ended (docs/slurm.md#polling).

The SLURM plugin asks (squeue or sacct) after a wait that starts at the profile's initial
wait and grows by 10 s after every question that found no job ended, up to 180 s. A slot
freed by a finished job stays empty until the next question: measured on the one-node
cluster, 7 s in the median for jobs of a few seconds, minutes after a long training.
The running executor (not the plugin's class) gets two changes:

- the wait is capped at `slurm.status_poll_max_s`;
- the wait ends at once when the executor shuts down (the driver's end joins the thread
  that waits, so a signal's stop would otherwise wait out the interval);
- the wait ends early once a job's outputs are on the shared filesystem. Writing them is
  the step's last act (an execution's result and score, a session's record), so the job
  ends a moment later: the driver asks one second after it sees them, and again each
  second while that job still runs, for at most FINISHING_WINDOW_S. Looking costs one
  stat per output of each job in flight, every LOOK_S, on the driver's filesystem; the
  controller is asked no more often than before, save that one question per job.
"""

from __future__ import annotations

import asyncio
import os
import time

LOOK_S = 0.5
FINISHING_POLL_S = 1.0
# A job whose outputs stand while it runs on (a slow file system sync, a hung step) is
# asked about at the plugin's pace again after this long.
FINISHING_WINDOW_S = 10.0
# Where a ring's configuration predates slurm.status_poll_max_s (config/config.yaml).
STATUS_POLL_MAX_S = 30


def status_poll_max_s(configs: dict | None) -> float:
    """The shortest slurm.status_poll_max_s among the rings' configurations."""
    found = [
        float(poll)
        for config in (configs or {}).values()
        if (poll := (config.get("slurm") or {}).get("status_poll_max_s")) is not None
    ]
    return min(found, default=STATUS_POLL_MAX_S)


def poll_sooner(executor, max_s: float) -> bool:
    """Cap the plugin's wait between two status questions at `max_s` and end it early when a
    job's outputs appear (see the module's docstring). The wait is a property of the
    executor's class, so the instance gets a subclass; returns whether it could."""
    cls = type(executor)
    prop = getattr(cls, "next_seconds_between_status_checks", None)
    if not isinstance(prop, property) or prop.fset is None:
        return False
    if getattr(cls, "_ringflow_poll_cap", None) is not None:
        cls._ringflow_poll_cap = max_s  # another ring of the same run: the new cap holds
        return True

    def capped(self, value):
        cap = type(self)._ringflow_poll_cap
        prop.fset(self, value if value is None else min(value, cap))

    async def sleep(self):
        seen = self.__dict__.setdefault("_ringflow_outputs_seen", {})
        # The driver's end waits for this thread (the executor's shutdown joins it): a
        # signal's stop must not wait out a whole interval.
        await wait_or_wake(
            self.next_seconds_between_status_checks,
            lambda: finishing_jobs(getattr(self, "active_jobs", ()), seen),
            stopping=lambda: not getattr(self, "wait", True),
        )

    executor.__class__ = type(cls.__name__, (cls,), {
        "next_seconds_between_status_checks": property(prop.fget, capped, prop.fdel),
        "sleep": sleep,
        "_ringflow_poll_cap": max_s,
    })  # fmt: skip
    return True


async def wait_or_wake(duration: float, finishing, look_s: float = LOOK_S,
                       settle_s: float = FINISHING_POLL_S,
                       stopping=lambda: False) -> None:  # fmt: skip
    """Sleep `duration` seconds, or `settle_s` after `finishing()` first says a job is
    finishing, whichever comes first; return within `look_s` once `stopping()` says so."""
    end = time.monotonic() + duration
    while (left := end - time.monotonic()) > 0:
        if stopping():
            return
        if finishing():
            await asyncio.sleep(min(left, settle_s))
            return
        await asyncio.sleep(min(left, look_s))


def finishing_jobs(active_jobs, seen: dict, now: float | None = None,
                   window_s: float = FINISHING_WINDOW_S) -> list[str]:  # fmt: skip
    """The SLURM ids of the jobs in flight whose outputs all exist, first seen so at most
    `window_s` ago. `seen` (job id -> when its outputs were first seen) is kept across
    calls and pruned to the jobs in flight."""
    now = time.monotonic() if now is None else now
    # The plugin empties and refills its list while it asks; a copy is a consistent view.
    active = {info.external_jobid: info for info in list(active_jobs)}
    for gone in set(seen) - set(active):
        del seen[gone]
    found = []
    for job_id, info in active.items():
        if job_id not in seen:
            outputs = [str(path) for path in getattr(info.job, "output", ())]
            if not outputs or not all(os.path.exists(path) for path in outputs):
                continue
            seen[job_id] = now
        if now - seen[job_id] <= window_s:
            found.append(job_id)
    return found
