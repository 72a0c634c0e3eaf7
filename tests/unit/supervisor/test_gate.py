"""A program starts inside its cgroups and limits with no code of ours in the child
(docs/architecture.md#how-a-program-starts)."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ringflow.core import statuses
from ringflow.supervisor import ResourceLimits, gate
from ringflow.supervisor.cgroup import DISABLE_ENV
from supervisetools import supervised

pytestmark = pytest.mark.user
# The module, which its function of the same name hides from `from … import`.
supervise_module = importlib.import_module("ringflow.supervisor.supervise")
# What the program sees of itself as its first lines run.
FIRST = """
import os, resource
with open(os.path.join(os.environ["OUT"], "first.txt"), "w") as out:
    out.write(open("/proc/self/cgroup").read())
    out.write(f"data {resource.getrlimit(resource.RLIMIT_DATA)[0]}\\n")
    out.write(f"stdin {os.readlink('/proc/self/fd/0')}\\n")
"""


def run(tmp_path: Path, argv: list[str], memory_gb: float | None = 0.5, **kw):
    limits = ResourceLimits(memory_gb=memory_gb, time_limit_min=2, threads=1)
    return supervised(tmp_path, argv, limits, **kw)


def python(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


@pytest.fixture
def popen_calls(monkeypatch) -> list[dict]:
    """The keyword arguments of every Popen the supervisor makes (each still runs)."""
    calls: list[dict] = []
    real = subprocess.Popen

    def recording(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(supervise_module.subprocess, "Popen", recording)
    return calls


def test_the_program_starts_inside_its_cgroups_and_limits(tmp_path, popen_calls):
    outcome = run(tmp_path, python(FIRST))
    assert outcome.status == statuses.OK, outcome.reason
    first = (tmp_path / "output" / "first.txt").read_text()
    assert "stdin /dev/null" in first
    cgroup = outcome.limits["cgroup"]
    owned = [cgroup.get(k) for k in ("cgroup2", "memory_v1") if cgroup.get(k)]
    if not owned:  # an ordinary user without delegation: the data limit holds memory
        assert f"data {outcome.limits['memory']['rlimit_data_bytes']}" in first
    for path in owned:
        assert os.path.basename(path) in first, (path, first)
    assert len(popen_calls) == 1 and popen_calls[0].get("preexec_fn") is None


def test_a_run_with_nothing_to_join_starts_without_the_gate(tmp_path, monkeypatch, popen_calls):
    monkeypatch.setenv(DISABLE_ENV, "1")
    outcome = run(tmp_path, python("import sys; sys.exit(3)"), memory_gb=None)
    assert outcome.exit_code == 3
    assert popen_calls[0]["stdin"] == subprocess.DEVNULL


def test_what_starts_the_run_is_called_in_the_starting_thread(tmp_path):
    seen = []
    outcome = run(tmp_path, python("pass"), spawn_setup=lambda: seen.append(os.getpid()))
    assert outcome.status == statuses.OK and seen == [os.getpid()]


def test_a_limit_the_kernel_refuses_starts_nothing(tmp_path, monkeypatch):
    def refused(pid, procs_files, data_limit):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(gate, "place", refused)
    outcome = run(tmp_path, python(FIRST))
    assert outcome.status == statuses.CRASH
    assert outcome.start_failed
    assert "Operation not permitted" in outcome.reason
    assert not (tmp_path / "output" / "first.txt").exists()


@pytest.mark.parametrize("command", ["/nonexistent/program", "no-such-program-anywhere"])
def test_a_program_that_cannot_start_is_refused_as_popen_refuses_it(tmp_path, command):
    outcome = run(tmp_path, [command])
    assert outcome.start_failed
    assert outcome.reason.startswith(f"could not start {command!r}")


def test_the_gate_without_its_go_exits_without_starting_the_program(tmp_path):
    marker = tmp_path / "ran"
    read, write = os.pipe()
    proc = subprocess.Popen(gate.gated_argv(["touch", str(marker)]), stdin=read)
    os.close(read)
    os.write(write, b"no\n")
    os.close(write)
    assert proc.wait(timeout=10) == gate.NOT_RELEASED
    assert not marker.exists()


def test_a_program_named_relative_to_its_folder_starts_through_the_gate(
    tmp_path, monkeypatch, popen_calls
):
    script = tmp_path / "run.sh"
    script.write_text('#!/bin/sh\necho "$0 ran" > "$OUT/ran.txt"\n')
    script.chmod(0o755)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the supervisor's own folder is not the program's
    outcome = run(tmp_path, ["./run.sh"], memory_gb=0.5)
    assert outcome.status == statuses.OK, outcome.reason
    assert (tmp_path / "output" / "ran.txt").read_text() == "./run.sh ran\n"
    assert popen_calls[0]["stdin"] != subprocess.DEVNULL  # the gate was used


def test_the_gate_opens_whatever_field_separators_the_environment_sets(tmp_path):
    marker = tmp_path / "ran"
    read, write = os.pipe()
    env = {"PATH": os.environ["PATH"], "IFS": "o"}
    proc = subprocess.Popen(gate.gated_argv(["touch", str(marker)]), stdin=read, env=env)
    os.close(read)
    gate.release(write)
    assert proc.wait(timeout=10) == 0
    assert marker.exists()


def test_a_start_failure_is_told_after_the_limits_it_would_have_had(tmp_path, monkeypatch):
    # Without a memory cgroup (an ordinary user) the supervisor first notes how memory is
    # held; the failed start comes after it and must still read as the machinery's.
    monkeypatch.setenv(DISABLE_ENV, "1")
    outcome = run(tmp_path, ["/nonexistent/program"], memory_gb=0.5)
    assert [e["event"] for e in outcome.events][:2] == ["limits", "start_failed"]
    assert outcome.start_failed
    assert not run(tmp_path, python("pass"), memory_gb=0.5).start_failed
