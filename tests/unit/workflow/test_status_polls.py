"""When the driver asks SLURM about its jobs (docs/slurm.md#polling): the plugin's growing
wait is capped, and it ends early once a job's outputs are written, without a controller."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

from ringflow.workflow.status_polls import (
    finishing_jobs,
    poll_sooner,
    status_poll_max_s,
    wait_or_wake,
)


class PollingExecutor:
    """The plugin's executor as far as its polling goes: the wait between status queries
    is a property of the class (snakemake_interface_executor_plugins' RemoteExecutor)."""

    def __init__(self, active_jobs=()):
        self._wait = None
        self.active_jobs = list(active_jobs)

    @property
    def next_seconds_between_status_checks(self):
        return 2 if self._wait is None else self._wait

    @next_seconds_between_status_checks.setter
    def next_seconds_between_status_checks(self, value):
        self._wait = value

    def back_off(self):  # what the plugin does after a query that found no job ended
        self.next_seconds_between_status_checks = min(
            self.next_seconds_between_status_checks + 10, 180
        )


def test_the_plugins_growing_wait_between_status_queries_is_capped():
    executor, other = PollingExecutor(), PollingExecutor()
    assert poll_sooner(executor, 30)
    for _ in range(20):
        executor.back_off()
        other.back_off()
    assert executor.next_seconds_between_status_checks == 30
    assert other.next_seconds_between_status_checks == 180  # only that executor
    executor.next_seconds_between_status_checks = 2  # a job ended: back to the start
    assert executor.next_seconds_between_status_checks == 2
    assert isinstance(executor, PollingExecutor)
    # Capped again (another ring of the run): the new cap holds.
    assert poll_sooner(executor, 15)
    executor.back_off()
    executor.back_off()
    assert executor.next_seconds_between_status_checks == 15
    # An executor without the property is left as it is.
    assert not poll_sooner(SimpleNamespace(next_seconds_between_status_checks=5), 30)


def test_the_shortest_poll_cap_of_the_rings_holds():
    assert status_poll_max_s(None) == 30
    assert status_poll_max_s({"a": {"slurm": {"status_poll_max_s": 20}},
                              "b": {"slurm": {"status_poll_max_s": 45}}}) == 20  # fmt: skip
    assert status_poll_max_s({"a": {"slurm": {"pending_warn_min": 5}}}) == 30


def submitted(job_id: str, *outputs) -> SimpleNamespace:
    """A job in flight as the plugin lists it (SubmittedJobInfo): its SLURM id and job."""
    return SimpleNamespace(external_jobid=job_id, job=SimpleNamespace(output=list(outputs)))


def test_a_job_is_finishing_once_all_its_outputs_exist(tmp_path):
    result, score = tmp_path / "result.json", tmp_path / "score.json"
    jobs = [submitted("7", result, score), submitted("8", tmp_path / "other.json")]
    seen = {}
    assert finishing_jobs(jobs, seen, now=100.0) == []
    result.write_text("{}")
    assert finishing_jobs(jobs, seen, now=101.0) == []  # the score is not there yet
    score.write_text("{}")
    assert finishing_jobs(jobs, seen, now=102.0) == ["7"]
    assert finishing_jobs(jobs, seen, now=111.0) == ["7"]
    # Still running long after its outputs appeared: back to the plugin's own pace.
    assert finishing_jobs(jobs, seen, now=112.5) == []
    # A job that left the list is forgotten; one without outputs never finishes early.
    assert finishing_jobs([submitted("8", tmp_path / "other.json"), submitted("9")], seen,
                          now=113.0) == []  # fmt: skip
    assert seen == {}


def test_the_wait_ends_a_second_after_a_job_is_seen_finishing():
    calls = []

    def finishing():
        calls.append(time.monotonic())
        return len(calls) >= 3

    started = time.monotonic()
    asyncio.run(wait_or_wake(30, finishing, look_s=0.05, settle_s=0.2))
    took = time.monotonic() - started
    assert 0.25 <= took < 5, took
    assert len(calls) == 3
    # Nothing finishing: the whole wait, and no longer.
    started = time.monotonic()
    asyncio.run(wait_or_wake(0.3, lambda: False, look_s=0.05))
    assert 0.3 <= time.monotonic() - started < 5


def test_the_executors_sleep_wakes_for_a_finished_jobs_outputs(tmp_path):
    result = tmp_path / "result.json"
    executor = PollingExecutor([submitted("41", result)])
    assert poll_sooner(executor, 30)
    executor.next_seconds_between_status_checks = 20

    async def write_then_sleep():
        asyncio.get_running_loop().call_later(0.3, result.write_text, "{}")
        started = time.monotonic()
        await executor.sleep()
        return time.monotonic() - started

    took = asyncio.run(write_then_sleep())
    assert took < 10, f"slept {took:.1f} s of 20 although the job's outputs were written"


def test_the_executors_sleep_ends_at_once_when_it_shuts_down():
    """The driver's end joins the thread that sleeps between status questions: a stop must
    not wait out the interval (up to slurm.status_poll_max_s)."""
    executor = PollingExecutor()
    executor.wait = True
    assert poll_sooner(executor, 30)
    executor.next_seconds_between_status_checks = 20

    async def stop_then_sleep():
        asyncio.get_running_loop().call_later(0.3, setattr, executor, "wait", False)
        started = time.monotonic()
        await executor.sleep()
        return time.monotonic() - started

    took = asyncio.run(stop_then_sleep())
    assert took < 5, f"slept {took:.1f} s of 20 although the executor was shutting down"


def test_the_executor_base_of_snakemakes_plugins_has_what_the_early_wake_replaces():
    """The SLURM plugin's executor inherits its polling loop from Snakemake's RemoteExecutor:
    the loop awaits `self.sleep()` between questions, the wait is a settable property, and
    each job in flight is a SubmittedJobInfo with its job (outputs) and SLURM id."""
    import dataclasses
    import inspect

    from snakemake_interface_executor_plugins.executors.base import SubmittedJobInfo
    from snakemake_interface_executor_plugins.executors.remote import RemoteExecutor

    assert inspect.iscoroutinefunction(RemoteExecutor.sleep)
    assert "await self.sleep()" in inspect.getsource(RemoteExecutor._wait_for_jobs)
    wait = RemoteExecutor.__dict__["next_seconds_between_status_checks"]
    assert isinstance(wait, property) and wait.fset is not None
    assert {"job", "external_jobid"} <= {f.name for f in dataclasses.fields(SubmittedJobInfo)}
    # Its shutdown clears `wait`, then joins the thread that sleeps.
    shutdown = inspect.getsource(RemoteExecutor.shutdown)
    assert shutdown.index("self.wait = False") < shutdown.index("self.wait_thread.join()")
