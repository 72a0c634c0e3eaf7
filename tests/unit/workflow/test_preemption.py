"""A preempted SLURM job is reported failed, so the driver records it and goes on
(ringflow.workflow.preemption). The plugin's own check_active_jobs needs a controller; a
class with the same contract stands in for it here, and the SLURM tests pin the plugin's
reading of PREEMPTED (tests/e2e/test_slurm_e2e.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from ringflow.cluster.jobs import parse_states, state_in_message
from ringflow.workflow.preemption import report_preempted


class PluginLike:
    """Yields every job still held, as the plugin does for PENDING, RUNNING and PREEMPTED
    alike, and warns (sets `_preemption_warning`) once it has seen a PREEMPTED job."""

    def __init__(self, states):
        self.states = states
        self._preemption_warning = False
        self.errors = []
        self.successes = []

    async def check_active_jobs(self, active_jobs):
        for job in active_jobs:
            if self.states[job.external_jobid] == "PREEMPTED":
                self._preemption_warning = True
            yield job

    def report_job_error(self, job, msg=None, **kwargs):
        self.errors.append((job.external_jobid, msg))

    def report_job_success(self, job):
        self.successes.append(job.external_jobid)


def held_after_one_round(executor, jobs):
    async def collect():
        return [job.external_jobid async for job in executor.check_active_jobs(jobs)]

    return asyncio.run(collect())


def jobs_(*ids):
    return [SimpleNamespace(external_jobid=i) for i in ids]


def test_a_preempted_job_is_reported_failed_in_words_that_name_its_state(capsys):
    states = {"41": "RUNNING", "42": "PREEMPTED", "43": "PENDING"}
    executor = PluginLike(states)
    asked = []
    assert report_preempted(executor, query=lambda ids: asked.append(ids) or states)
    assert held_after_one_round(executor, jobs_("41", "42", "43")) == ["41", "43"]
    assert [job for job, _ in executor.errors] == ["42"]
    assert state_in_message(executor.errors[0][1]) == "PREEMPTED"
    assert asked == [["41", "42", "43"]]
    assert "SLURM preempted job 42, which it does not requeue" in capsys.readouterr().out


def test_nothing_is_asked_until_the_plugin_has_seen_a_preemption():
    states = {"41": "RUNNING", "43": "PENDING"}
    executor = PluginLike(states)
    asked = []
    report_preempted(executor, query=lambda ids: asked.append(ids) or states)
    assert held_after_one_round(executor, jobs_("41", "43")) == ["41", "43"]
    assert asked == [] and executor.errors == []


def test_the_change_is_the_instances_and_made_once():
    executor = PluginLike({})
    other = PluginLike({})
    assert report_preempted(executor, query=dict) and report_preempted(executor, query=dict)
    assert type(executor).__mro__[1] is PluginLike
    assert type(other) is PluginLike
    assert not report_preempted(SimpleNamespace(), query=dict)


def test_squeue_states_are_read_by_id():
    text = "41|RUNNING\n42|PREEMPTED\n\n43|CANCELLED by 0\n"
    assert parse_states(text) == {"41": "RUNNING", "42": "PREEMPTED", "43": "CANCELLED"}
