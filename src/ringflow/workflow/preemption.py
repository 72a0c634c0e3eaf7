"""A job SLURM preempted, as the driver hears of it (docs/slurm.md#job-ids-signals-and-kills).

Executions and engineer sessions are submitted with --no-requeue, so a preempted job has
ended for good: SLURM will not start it again. The SLURM executor plugin (2.8) reads
PREEMPTED as a job SLURM will resume, warns once, and counts the job as running for ever,
so the driver would wait on it until the ring's time ran out. The running executor (not
the plugin's class) gets one change: once the plugin has seen a preemption, each status
round asks SLURM (squeue, else sacct) about the jobs the plugin still holds, and reports
those that ended PREEMPTED as failed, in the plugin's own words. The driver then records
them as it records any job SLURM ended, and the ring goes on.
"""

from __future__ import annotations

from ..cluster import jobs

PREEMPTED = "PREEMPTED"


def preempted_message(job_id: str) -> str:
    """The failure message the plugin writes for a job SLURM ended, for a preempted one:
    `cluster.jobs.state_in_message` reads the state back from it."""
    return f"SLURM-job '{job_id}' failed, SLURM status is: '{PREEMPTED}'."


def report_preempted(executor, query=jobs.query_states) -> bool:
    """Have the running executor report its preempted jobs as failed (see the module's
    docstring); returns whether it could. `query` gives {job id: state}."""
    cls = type(executor)
    check = getattr(cls, "check_active_jobs", None)
    if check is None or not hasattr(executor, "report_job_error"):
        return False
    if getattr(cls, "_ringflow_reports_preempted", False):
        return True

    async def check_active_jobs(self, active_jobs):
        held = [job async for job in check(self, active_jobs)]
        # The plugin warns once, at the first PREEMPTED it sees; until then nothing is asked.
        ended = set()
        if held and getattr(self, "_preemption_warning", False):
            states = query([str(job.external_jobid) for job in held])
            for job in held:
                if states.get(str(job.external_jobid)) == PREEMPTED:
                    # The plugin's warning says SLURM will resume the job: not ringflow's.
                    print(f"ringflow: SLURM preempted job {job.external_jobid}, which it does "
                          "not requeue (--no-requeue): the job has ended", flush=True)  # fmt: skip
                    self.report_job_error(job, msg=preempted_message(str(job.external_jobid)))
                    ended.add(id(job))
        for job in held:
            if id(job) not in ended:
                yield job

    executor.__class__ = type(cls.__name__, (cls,), {
        "check_active_jobs": check_active_jobs,
        "_ringflow_reports_preempted": True,
    })  # fmt: skip
    return True
