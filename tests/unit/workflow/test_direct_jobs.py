"""A SLURM job runs its step itself (docs/slurm.md#what-a-job-runs): the command each job
gets, run as the plugin's `sbatch … --wrap="…"` or its script on sbatch's standard input
hands it to the job's shell; which jobs keep the plugin's command; and a pin on the
Snakemake jobs it reads (the plugin's side is pinned in tests/e2e/test_slurm_e2e.py, where
the plugin is installed)."""

from __future__ import annotations

import inspect
import shlex
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from ringflow.workflow.direct_jobs import (
    direct_command,
    run_steps_in_their_jobs,
    submit_commands_as_scripts,
)


class Output(str):
    def __new__(cls, path, directory=False):
        made = super().__new__(cls, path)
        made.is_directory = directory
        return made


def job(tmp_path: Path, command: str | None, **changes):
    """The parts of a Snakemake job that direct_command reads, for an execution."""
    ring = tmp_path / "ring"
    fields = dict(
        group=False,
        is_shell=command is not None,
        is_shadow=False,
        benchmark=None,
        output=[
            Output(ring / "nodes" / "n1" / "result.json"),
            Output(ring / "nodes" / "n1" / "score.json"),
        ],
        log=[str(ring / "logs" / "execute" / "n1.proxy.s0.log")],
        input=[],
        shellcmd=command,
        wildcards_dict={"node": "n1", "view": "proxy", "variant": "s0"},
        rule=SimpleNamespace(name="execute"),
    )
    fields.update(changes)
    group = fields.pop("group")
    return SimpleNamespace(is_group=lambda: group, **fields)


def as_wrapped(script: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run `script` as a SLURM job gets it: the plugin escapes double quotes and passes
    `--wrap="…"` through a shell, and the job's script runs under sh."""
    escaped = script.replace('"', '\\"')
    return subprocess.run(f'sh -c "{escaped}"', shell=True, cwd=cwd, capture_output=True,
                          text=True, timeout=60)  # fmt: skip


def as_script(script: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run `script` as a SLURM job gets it where the plugin submits commands as scripts:
    `#!/bin/sh` and the command, on sbatch's standard input, run under sh."""
    return subprocess.run(["sh", "-s"], input=f"#!/bin/sh\n{script}", cwd=cwd,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def test_the_job_makes_its_folders_removes_stale_outputs_and_runs_the_step(tmp_path):
    stale = tmp_path / "ring" / "nodes" / "n1" / "score.json"
    stale.parent.mkdir(parents=True)
    stale.write_text("from an earlier run")
    log = tmp_path / "ring" / "logs" / "execute" / "n1.proxy.s0.log"
    result = tmp_path / "ring" / "nodes" / "n1" / "result.json"
    step = (f"{sys.executable} -c 'import pathlib, sys; print(1); "
            f"pathlib.Path(sys.argv[1]).write_text(str(2))' {result} > {log} 2>&1")  # fmt: skip
    script = direct_command(job(tmp_path, step))
    assert script is not None and "snakemake" not in script
    # A double quote would be escaped on the way: the plugin's command stays.
    assert direct_command(job(tmp_path, 'echo "x" > /r/out')) is None
    done = as_wrapped(script, tmp_path)
    assert done.returncode == 0, done
    assert not stale.exists()
    assert result.read_text() == "2"
    assert log.read_text() == "1\n"
    # The SLURM log says which step the job is and where its own log is.
    said = done.stdout.strip()
    assert said == f"ringflow: rule execute node=n1 view=proxy variant=s0, its log: {log}"


def test_the_job_waits_for_an_input_the_node_does_not_see_yet(tmp_path):
    late = tmp_path / "ring" / "late-input"
    seen = tmp_path / "ring" / "seen"
    script = direct_command(job(tmp_path, f"cp {late} {seen}", input=[str(late)]),
                            latency_wait=20)  # fmt: skip
    assert "$" not in script
    writer = subprocess.Popen(["sh", "-c", f"sleep 2; echo written > {late}"])
    try:
        start = time.monotonic()
        done = as_wrapped(script, tmp_path)
        waited = time.monotonic() - start
    finally:
        writer.wait(timeout=30)
    assert done.returncode == 0, done
    assert seen.read_text() == "written\n"
    assert 1.5 < waited < 15, waited


def test_an_input_never_seen_is_waited_for_then_left_to_the_step(tmp_path):
    missing = tmp_path / "never"
    script = direct_command(job(tmp_path, f"cat {missing}", input=[str(missing)]),
                            latency_wait=2)  # fmt: skip
    start = time.monotonic()
    done = as_wrapped(script, tmp_path)
    assert 1.5 < time.monotonic() - start < 15
    assert done.returncode != 0 and "No such file" in done.stderr


def test_a_failing_step_fails_the_job_with_its_exit_status(tmp_path):
    log = tmp_path / "ring" / "logs" / "execute" / "n1.proxy.s0.log"
    script = direct_command(job(tmp_path, f"{sys.executable} -c 'raise SystemExit(3)' > {log}"))
    assert as_wrapped(script, tmp_path).returncode == 3


def test_a_folder_that_cannot_be_made_fails_the_job_before_the_step(tmp_path):
    (tmp_path / "ring").write_text("a file where the ring's folder should be")
    marker = tmp_path / "ran"
    script = direct_command(job(tmp_path, f"touch {marker}"))
    assert as_wrapped(script, tmp_path).returncode != 0
    assert not marker.exists()


def test_the_plugins_exported_variables_come_first(tmp_path):
    out = tmp_path / "ring" / "seen"
    script = direct_command(job(tmp_path, f"printenv SEEN_BY_STEP > {out}"),
                            exports="export SEEN_BY_STEP='yes' &&")  # fmt: skip
    assert script.startswith("export SEEN_BY_STEP='yes'; set -e;")
    assert as_wrapped(script, tmp_path).returncode == 0
    assert out.read_text() == "yes\n"


@pytest.mark.parametrize(
    "changes",
    [
        {"group": True},
        {"is_shell": False, "shellcmd": None},
        {"is_shadow": True},
        {"benchmark": "bench.tsv"},
        {"output": [Output("/r/nodes/n1", directory=True)]},
        {"shellcmd": "echo $HOME > /r/out"},
        {"shellcmd": "echo `id` > /r/out"},
        {"shellcmd": "echo a\\b > /r/out"},
    ],
    ids=[
        "group",
        "no shell",
        "shadow",
        "benchmark",
        "directory",
        "dollar",
        "backquote",
        "backslash",
    ],
)
def test_jobs_it_does_not_fit_keep_the_plugins_command(tmp_path, changes):
    assert direct_command(job(tmp_path, "true", **changes)) is None


def test_a_conda_or_container_deployment_keeps_the_plugins_command(tmp_path):
    assert direct_command(job(tmp_path, "true"), deployment=("conda",)) is None
    assert direct_command(job(tmp_path, "true")) is not None


ODD = 'odd $HOME `id` a\\b "q" dir'  # what a quoted folder name may hold


def test_as_a_script_a_folder_with_shell_characters_is_carried_as_written(tmp_path):
    """Where the plugin submits a script, a quoted path with `$`, a backquote, a backslash
    or a double quote reaches the step as written; through --wrap the plugin's command
    stays, since the submitting shell would read them."""
    base = tmp_path / ODD
    out = base / "ring" / "nodes" / "n1" / "result.json"
    step = f"printf %s {shlex.quote(str(out))} > {shlex.quote(str(out))}"
    odd = job(base, step)
    assert direct_command(odd) is None
    script = direct_command(odd, as_script=True)
    assert script is not None
    done = as_script(script, tmp_path)
    assert done.returncode == 0, done
    assert out.read_text() == str(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == [ODD]  # nothing made elsewhere
    assert direct_command(job(base, "printf 'a\\0b'"), as_script=True) is not None
    assert direct_command(job(base, "true", log=[str(base / "l\0g")]), as_script=True) is None


class PluginLike:
    """Stands in for the SLURM executor: its own command for every job, and the plugin's
    setting that submits commands as scripts."""

    def __init__(self, script_setting=True):
        self.workflow = SimpleNamespace(deployment_settings=SimpleNamespace(
            deployment_method=frozenset()))  # fmt: skip
        if script_setting:
            self.workflow.executor_settings = SimpleNamespace(pass_command_as_script=False)

    def format_job_exec(self, job):
        return "python -m snakemake --mode remote"

    def get_envvar_declarations(self):
        return ""


def test_the_running_executor_gets_the_change_once(tmp_path):
    executor = PluginLike()
    assert run_steps_in_their_jobs(executor, executor.workflow)
    assert run_steps_in_their_jobs(executor, executor.workflow)
    assert type(executor).__mro__[1] is PluginLike  # subclassed once, not twice
    assert not hasattr(PluginLike, "_ringflow_runs_steps")  # the plugin's class is untouched
    assert executor.format_job_exec(job(tmp_path, "true")).endswith("; true")
    fallback = job(tmp_path, "true", group=True)
    assert executor.format_job_exec(fallback) == "python -m snakemake --mode remote"
    # The plugin now submits scripts, so a folder with a `$` keeps the job's own command.
    assert executor.workflow.executor_settings.pass_command_as_script is True
    assert executor.format_job_exec(job(tmp_path / ODD, "true")).endswith("; true")


def test_a_plugin_without_the_script_setting_keeps_wrap_and_its_limits(tmp_path):
    executor = PluginLike(script_setting=False)
    assert not submit_commands_as_scripts(executor)
    assert run_steps_in_their_jobs(executor, executor.workflow)
    assert executor.format_job_exec(job(tmp_path, "true")).endswith("; true")
    odd = job(tmp_path / ODD, "true")
    assert executor.format_job_exec(odd) == "python -m snakemake --mode remote"


def test_pin_snakemake_jobs_have_what_the_command_is_made_of():
    from snakemake.io import _IOFile
    from snakemake.jobs import Job

    for name in ("is_group", "is_shell", "is_shadow", "benchmark", "input", "output", "log",
                 "shellcmd", "wildcards_dict", "rule"):  # fmt: skip
        assert hasattr(Job, name), name
    assert isinstance(inspect.getattr_static(_IOFile, "is_directory"), property)
