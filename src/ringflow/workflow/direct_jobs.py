"""A SLURM job that runs its step itself (docs/slurm.md#what-a-job-runs).

The SLURM executor plugin's job starts Snakemake, which starts Snakemake once more through
`srun`, which runs the rule's shell command: two Snakemake starts, each over a second of a
CPU (more on a busy node), for an execution that often takes one or two. The rules that
become SLURM jobs (an execution, an engineer session) are each one shell command, which
the driver has already formatted, and the driver checks and records a remote job's outputs
as it does a local one's. So the job runs the command itself, after what Snakemake's start
inside the job would have done first: the inputs waited for (up to Snakemake's
--latency-wait), the output and log folders made, stale outputs removed, with a line in
the SLURM log that says which step this is and where its own log is. The plugin still
submits the job, names it, polls it and cancels it.

A job this does not fit keeps the plugin's command: a group, a rule without a shell
command or with a shadow folder or a benchmark, a directory among the outputs, a rule run
in a conda environment or a container, or a command that the plugin's `--wrap="…"` cannot
carry as it is (it escapes only double quotes, so `$`, backquotes and backslashes would be
read by the submitting shell).
"""

from __future__ import annotations

import shlex
from pathlib import Path

# What `--wrap="…"` would change or cut: the plugin escapes double quotes only.
UNSAFE_IN_WRAP = frozenset('$`\\"\n\r\0')


def wait_for_inputs(inputs: list[str], seconds: int) -> str:
    """A shell loop that waits up to `seconds` for the inputs to be seen, as Snakemake's
    start inside the job did: on a shared filesystem a file the driver just wrote may not
    yet be seen on the node. Without `$`, which the plugin's --wrap would expand."""
    if not inputs or seconds <= 0:
        return ""
    seen = " && ".join(f"test -e {shlex.quote(p)}" for p in inputs)
    tries = " ".join(str(n) for n in range(1, int(seconds) + 1))
    return f"for try in {tries}; do {seen} && break; sleep 1; done"


def direct_command(job, exports: str = "", deployment=(), latency_wait: int = 0) -> str | None:
    """The job's own command for a SLURM job, or None where the plugin's stays (see the
    module's docstring). `exports` is the plugin's `export …&&` prefix, if any;
    `latency_wait` is how long the job waits for its inputs to be seen."""
    if job.is_group() or not job.is_shell or job.is_shadow or job.benchmark or deployment:
        return None
    if any(f.is_directory for f in job.output):
        return None
    command = job.shellcmd
    if not command:
        return None
    outputs = [str(f) for f in job.output]
    logs = [str(f) for f in job.log]
    folders = sorted({str(Path(p).parent) for p in outputs + logs})
    wildcards = " ".join(f"{k}={v}" for k, v in job.wildcards_dict.items())
    said = f"ringflow: rule {job.rule.name} {wildcards}".rstrip()
    said += f", its log: {' '.join(logs)}" if logs else ""
    parts = [
        exports.rstrip("& ").strip() if exports else "",
        "set -e",
        f"mkdir -p {' '.join(map(shlex.quote, folders))}" if folders else "",
        f"rm -f {' '.join(map(shlex.quote, outputs))}" if outputs else "",
        wait_for_inputs([str(f) for f in job.input], latency_wait),
        f"echo {shlex.quote(said)}",
        command.strip(),
    ]
    script = "; ".join(p for p in parts if p)
    if UNSAFE_IN_WRAP & set(script):
        return None
    return script


def run_steps_in_their_jobs(executor, workflow) -> bool:
    """Have the running SLURM executor submit each job that fits with its own command
    (the module's docstring); returns whether it could. The change is to the instance, as
    for the driver's other corrections of the plugin, and made once."""
    cls = type(executor)
    plugin_command = getattr(cls, "format_job_exec", None)
    if plugin_command is None:
        return False
    if getattr(cls, "_ringflow_runs_steps", False):
        return True
    deployment = tuple(getattr(workflow.deployment_settings, "deployment_method", ()) or ())
    settings = getattr(workflow, "execution_settings", None)
    latency_wait = int(getattr(settings, "latency_wait", 0) or 0)

    def format_job_exec(self, job):
        exports = self.get_envvar_declarations() if hasattr(self, "get_envvar_declarations") else ""
        own = direct_command(job, exports, deployment, latency_wait)
        return own if own is not None else plugin_command(self, job)

    executor.__class__ = type(cls.__name__, (cls,), {
        "format_job_exec": format_job_exec,
        "_ringflow_runs_steps": True,
    })  # fmt: skip
    return True
