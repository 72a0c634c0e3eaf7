"""The driver's scheduler keeps one re-evaluation timer pending, not one per round
(docs/architecture.md#the-drivers-scheduler)."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

from ringflow.workflow.scheduler_wakeups import one_pending_wakeup


def scheduler():
    """Snakemake's JobScheduler as far as its wake-ups go: a semaphore each round waits on,
    and the method that arms a timer to release it."""
    return SimpleNamespace(_open_jobs=threading.Semaphore(0), _schedule_reevalutation=print)


def test_many_rounds_arm_one_timer_and_it_wakes_the_scheduler_once():
    sched = scheduler()
    assert one_pending_wakeup(sched)
    before = threading.active_count()
    for _ in range(50):
        sched._schedule_reevalutation(0.2)
    assert threading.active_count() == before + 1
    assert sched._open_jobs.acquire(timeout=2)
    assert not sched._open_jobs.acquire(timeout=0.4)


def test_a_round_after_the_timer_fired_arms_the_next_one():
    sched = scheduler()
    one_pending_wakeup(sched)
    sched._schedule_reevalutation(0.05)
    assert sched._open_jobs.acquire(timeout=2)
    time.sleep(0.05)  # the timer's thread has cleared its mark once it released
    sched._schedule_reevalutation(0.05)
    assert sched._open_jobs.acquire(timeout=2)


def test_the_timer_never_holds_the_drivers_exit():
    sched = scheduler()
    one_pending_wakeup(sched)
    sched._schedule_reevalutation(60)
    timers = [t for t in threading.enumerate() if isinstance(t, threading.Timer)]
    assert timers and all(t.daemon for t in timers)
    for timer in timers:
        timer.cancel()


def test_a_scheduler_without_the_method_is_left_alone():
    assert not one_pending_wakeup(None)
    assert not one_pending_wakeup(SimpleNamespace(_open_jobs=threading.Semaphore(0)))


def test_snakemakes_scheduler_has_what_the_patch_replaces():
    from snakemake.scheduling.job_scheduler import JobScheduler

    source = inspect.getsource(JobScheduler.schedule)
    assert "self._open_jobs.acquire()" in source
    assert "self._schedule_reevalutation(self.job_rate_limiter.timespan)" in source
    assert "self._open_jobs.release()" in inspect.getsource(JobScheduler._schedule_reevalutation)


SNAKEFILE = """
from ringflow.workflow.scheduler_wakeups import one_pending_wakeup

onstart:
    if {patched}:
        one_pending_wakeup(workflow.scheduler)

rule all:
    input: expand("out/{{i}}.txt", i=range({jobs}))

rule one:
    output: "out/{{i}}.txt"
    shell: "sleep 0.3; touch {{output}}"
"""


def scheduling_rounds(tmp_path, patched: bool, jobs: int) -> tuple[int, float]:
    """Snakemake's scheduling rounds (its debug line per round) for `jobs` jobs of 0.3 s on
    two cores, and the run's wall time."""
    work = tmp_path / ("patched" if patched else "stock")
    work.mkdir()
    (work / "Snakefile").write_text(SNAKEFILE.format(patched=patched, jobs=jobs))
    started = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "2", "--verbose", "--nolock",
         "--scheduler", "greedy"],
        cwd=work, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    rounds = len(re.findall(r"Resources before job selection", run.stdout + run.stderr))
    return rounds, time.monotonic() - started


def test_a_workflows_rounds_grow_with_its_jobs_not_with_their_square(tmp_path):
    jobs = 40
    stock, _ = scheduling_rounds(tmp_path, patched=False, jobs=jobs)
    patched, wall = scheduling_rounds(tmp_path, patched=True, jobs=jobs)
    # One round per finished job, one per second from the limiter's timer, and a few more.
    assert patched <= jobs + wall + 10, (patched, wall)
    assert stock > 2 * patched, (stock, patched)
