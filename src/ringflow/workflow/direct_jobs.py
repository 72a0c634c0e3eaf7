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

The plugin hands a job's command to `sbatch` either as `--wrap="…"` on a command line that
a shell reads, escaping only double quotes, or as a script on sbatch's standard input
(its `pass_command_as_script` setting). Through `--wrap`, a `$`, a backquote or a backslash
in the command, which a quoted ring, store or checkout path may hold, is read by the
submitting shell; so the driver turns the script setting on wherever the plugin has it,
and the command reaches the job's shell as written.

A job this does not fit keeps the plugin's command: a group, a rule without a shell
command or with a shadow folder or a benchmark, a directory among the outputs, a rule run
in a conda environment or a container, or, where the plugin can only `--wrap`, a command
with one of the characters it would hand to the submitting shell.
"""

from __future__ import annotations

import shlex
from pathlib import Path

# What `--wrap="…"` would change or cut: the plugin escapes double quotes only.
UNSAFE_IN_WRAP = frozenset('$`\\"\n\r\0')
# A script on sbatch's standard input carries everything but NUL as written.
UNSAFE_IN_SCRIPT = frozenset("\0")


def wait_for_inputs(inputs: list[str], seconds: int) -> str:
    """A shell loop that waits up to `seconds` for the inputs to be seen, as Snakemake's
    start inside the job did: on a shared filesystem a file the driver just wrote may not
    yet be seen on the node. Without `$`, which the plugin's --wrap would expand."""
    if not inputs or seconds <= 0:
        return ""
    seen = " && ".join(f"test -e {shlex.quote(p)}" for p in inputs)
    tries = " ".join(str(n) for n in range(1, int(seconds) + 1))
    return f"for try in {tries}; do {seen} && break; sleep 1; done"


def direct_command(
    job, exports: str = "", deployment=(), latency_wait: int = 0, as_script: bool = False
) -> str | None:
    """The job's own command for a SLURM job, or None where the plugin's stays (see the
    module's docstring). `exports` is the plugin's `export …&&` prefix, if any;
    `latency_wait` is how long the job waits for its inputs to be seen; `as_script` says
    the plugin submits the command as a script rather than through `--wrap`."""
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
    if (UNSAFE_IN_SCRIPT if as_script else UNSAFE_IN_WRAP) & set(script):
        return None
    return script


def submit_commands_as_scripts(executor) -> bool:
    """Have the plugin submit each job's command as a script on sbatch's standard input
    rather than through `--wrap="…"` (the module's docstring); returns whether it will.
    Older plugins without the setting keep `--wrap`."""
    settings = getattr(getattr(executor, "workflow", None), "executor_settings", None)
    if settings is None or not hasattr(settings, "pass_command_as_script"):
        return False
    try:
        settings.pass_command_as_script = True
    except AttributeError:  # a frozen settings object
        return bool(settings.pass_command_as_script)
    return True


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

    as_script = submit_commands_as_scripts(executor)

    def format_job_exec(self, job):
        exports = self.get_envvar_declarations() if hasattr(self, "get_envvar_declarations") else ""
        own = direct_command(job, exports, deployment, latency_wait, as_script)
        return own if own is not None else plugin_command(self, job)

    executor.__class__ = type(cls.__name__, (cls,), {
        "format_job_exec": format_job_exec,
        "_ringflow_runs_steps": True,
    })  # fmt: skip
    return True
