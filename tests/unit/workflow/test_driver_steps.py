"""A local job's step sent to the resident server by the driver itself
(ringflow.workflow.driver_steps): run by a real Snakemake on a small Snakefile whose rules
run a probe step as the ring's rules run theirs."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import select
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from test_resident_steps import install_probe

from ringflow.workflow.driver_steps import (
    SERVER_ENV,
    current_umask,
    job_environment,
    step_words,
)
from ringflow.workflow.resident_client import step_command

PROBE = textwrap.dedent("""\
    import json, os, signal, sys, time
    import psutil

    def main():
        action = sys.argv[-1]  # exit0 (writes the rule's output), exit3, sleep3, sleep30, term,
        # termok (on SIGTERM, writes the rule's output and exits 0: a run its ring interrupted)
        if action == "term":
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))
        if action == "termok":
            def done(*_):
                open("out/termok.done", "w").close()
                sys.exit(0)
            signal.signal(signal.SIGTERM, done)
        server = psutil.Process(os.getppid())
        driver = server.parent()
        between = [" ".join(p.cmdline()) for p in driver.children(recursive=True)
                   if p.pid not in (server.pid, os.getpid())]
        print(json.dumps({"pid": os.getpid(), "server": server.pid, "driver": driver.pid,
                          "between": between, "argv": sys.argv[1:], "cwd": os.getcwd(),
                          "omp": os.environ.get("OMP_NUM_THREADS"),
                          "tmpdir": os.environ.get("TMPDIR"),
                          "address": os.environ.get("RINGFLOW_STEP_SERVER"),
                          "stdin": os.readlink("/proc/self/fd/0"), "umask": os.umask(0),
                          "title": open("/proc/self/cmdline", "rb").read().split(b"\\0")[0]
                          .decode(), "name": open("/proc/self/comm").read().strip()}),
              flush=True)
        print("to stderr", file=sys.stderr, flush=True)
        if action == "exit0":
            open("out/exit0.done", "w").close()
        time.sleep({"sleep3": 3, "sleep30": 30, "term": 60, "termok": 60}.get(action, 0))
        return int(action[4:]) if action.startswith("exit") else 0
    """)

SNAKEFILE = textwrap.dedent("""\
    from ringflow.workflow.driver_steps import send_local_steps
    from ringflow.workflow.relay import install_relay
    from ringflow.workflow.resident_steps import start_server

    STEP = {step!r}
    SERVER = []

    onstart:
        if config.get("deaf"):  # as when Snakemake drops the Ctrl-C (its log handler does)
            import signal
            signal.signal(signal.SIGINT, lambda *_: None)
        install_relay([])
        SERVER.append(start_server("resident_probe:main"))
        if config.get("direct", True):
            send_local_steps(workflow, SERVER[0].path)

    onsuccess:
        SERVER.pop().stop()

    onerror:
        SERVER.pop().stop()

    rule all:
        input: expand("out/{{action}}.done", action=config["actions"].split(","))

    rule step:
        output: "out/{{action}}.done"
        log: "logs/{{action}}.log"
        threads: 2
        params: step=STEP
        shell: "{{params.step}} execute 'a ring' {{wildcards.action:q}} > {{log:q}} 2>&1"

    rule after:
        input: "out/{{action}}.done"
        output: "out/{{action}}.after"
        shell: "touch {{output:q}}"
    rule shaped_otherwise:
        output: "out/{{action}}.other"
        log: "logs/{{action}}.other.log"
        params: step=STEP
        shell:
            "{{params.step}} execute 'a ring' {{wildcards.action:q}} > {{log:q}} 2>&1;"
            " touch {{output:q}}"
    """)

STEP = shlex.join(step_command(sys.executable))


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    install_probe(tmp_path, monkeypatch, PROBE)
    monkeypatch.delenv(SERVER_ENV, raising=False)
    folder = tmp_path / "w"
    folder.mkdir()
    (folder / "Snakefile").write_text(SNAKEFILE.format(step=STEP))
    return folder


def snakemake(folder: Path, *targets: str, actions="exit0", direct=True, umask=0o027, **kwargs):
    argv = [sys.executable, "-m", "snakemake", *targets, "--cores", "2", "--config",
            f"actions={actions}", f"direct={direct}",
            "--default-resources", f"tmpdir='{folder / 'tmp'}'"]  # fmt: skip
    return subprocess.Popen(argv, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, umask=umask, **kwargs)  # fmt: skip


def running(folder: Path, action: str):
    """The driver, and what the probe step said, once the step runs `action`."""
    proc = snakemake(folder, actions=action)
    log = folder / "logs" / f"{action}.log"
    deadline = time.monotonic() + 60
    while not (log.exists() and log.read_text().count("\n") >= 2):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    return proc, probe_of(folder, log.name)[0]


def probe_of(folder: Path, log: str) -> tuple[dict, str]:
    lines = (folder / "logs" / log).read_text().splitlines()
    return json.loads(lines[0]), "\n".join(lines[1:])


def test_the_rules_step_command_is_recognised_and_nothing_else():
    step = step_command("/v/bin/python")
    args = "execute 'runs/a ring' n001 proxy s0 --gpus 0"
    command = f"{shlex.join(step)} {args} > 'logs/x y.log' 2>&1"
    assert step_words(command, step) == (
        ["execute", "runs/a ring", "n001", "proxy", "s0", "--gpus", "0"],
        "logs/x y.log",
    )
    for other in (
        command + "; rm -rf x",  # more than the step
        command.replace(" 2>&1", ""),  # stderr elsewhere
        command.replace("> ", ">> "),  # appended
        f"{shlex.join(step)} execute a;b > l 2>&1",  # a word a shell reads otherwise
        f'{shlex.join(step)} execute "$HOME" > l 2>&1',  # expanded by a shell
        "/other/python -P x.py step execute a > l 2>&1",  # another program
        f"{shlex.join(step)} execute 'unclosed > l 2>&1",
        f"{shlex.join(step)} > l 2>&1",  # no step at all
    ):
        assert step_words(other, step) is None, other


def test_the_umask_is_read_without_being_changed(monkeypatch):
    """The driver has other threads: a umask set to 0 to read it, even for a moment,
    would give the files they create no mask."""
    mask = os.umask(0o027)
    try:

        def forbidden(_mask):
            raise AssertionError("the umask was set")

        monkeypatch.setattr(os, "umask", forbidden)
        assert current_umask() == 0o027
    finally:
        monkeypatch.undo()
        os.umask(mask)


def test_the_environment_is_the_one_snakemake_gives_a_shell_job(monkeypatch):
    monkeypatch.setenv(SERVER_ENV, "/run/s")
    monkeypatch.setenv("KEPT", "yes")
    env = job_environment(3, "/scratch/t")
    assert env[b"KEPT"] == b"yes"
    assert env[b"OMP_NUM_THREADS"] == env[b"MKL_NUM_THREADS"] == b"3"
    assert env[b"TMPDIR"] == env[b"TEMP"] == b"/scratch/t"
    assert SERVER_ENV.encode() not in env
    assert b"TMPDIR" not in job_environment(1, None) or os.environ.get("TMPDIR")


def test_a_local_step_job_runs_in_the_server_with_no_process_of_its_own(workdir):
    proc = snakemake(workdir)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    seen, rest = probe_of(workdir, "exit0.log")
    assert seen["between"] == []  # neither a shell nor the client ran for the job
    assert seen["driver"] == proc.pid
    assert seen["argv"] == ["step", "execute", "a ring", "exit0"]
    assert seen["cwd"] == str(workdir)
    assert seen["omp"] == "2"  # the rule's threads, as Snakemake's shell() gives them
    assert seen["tmpdir"] == str(workdir / "tmp")
    assert seen["address"] is None
    assert seen["stdin"] == "/dev/null"
    assert seen["umask"] == 0o027  # the driver's, read without changing it
    # ps shows the step's own command, as if it had started afresh, not the server's.
    assert seen["title"] == f"{sys.executable} -m ringflow step execute a ring exit0"
    assert seen["name"] == os.path.basename(sys.executable)  # as an exec would name it
    assert rest == "to stderr"


def test_without_the_driver_taking_it_the_job_runs_through_its_client(workdir):
    proc = snakemake(workdir, direct=False)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    seen, _ = probe_of(workdir, "exit0.log")
    assert any("resident_client.py step execute" in line for line in seen["between"])
    assert seen["omp"] == "2" and seen["tmpdir"] == str(workdir / "tmp")


def test_a_command_of_another_shape_runs_as_snakemake_runs_it(workdir):
    proc = snakemake(workdir, "out/exit0.other")
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    seen, _ = probe_of(workdir, "exit0.other.log")
    assert any("resident_client.py step execute" in line for line in seen["between"])


def test_a_failing_step_fails_its_job_with_its_exit_code(workdir):
    proc = snakemake(workdir, actions="exit3")
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert "returned non-zero exit status 3" in err
    assert not (workdir / "out" / "exit3.done").exists()


def test_a_signal_to_the_driver_reaches_an_execution_step(workdir):
    proc, _seen = running(workdir, "term")
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=60)
    assert "returned non-zero exit status 7" in err  # the step's own SIGTERM handler ran


def test_a_killed_driver_leaves_its_step_to_its_own_checks(workdir):
    proc, seen = running(workdir, "sleep30")
    proc.kill()
    proc.communicate(timeout=30)
    try:
        # As when its client outlived the driver: an execution's supervisor sees its
        # grandparent gone and stops on its own, rather than being killed unrecorded.
        time.sleep(0.5)
        assert psutil.pid_exists(seen["pid"])
    finally:
        for pid in (seen["pid"], seen["server"]):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_a_server_that_dies_mid_step_fails_the_job_loudly(workdir):
    proc, seen = running(workdir, "sleep3")
    log = workdir / "logs" / "sleep3.log"
    os.kill(seen["server"], signal.SIGKILL)
    try:
        _out, err = proc.communicate(timeout=90)  # the job waits for its step, then fails
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(seen["pid"], signal.SIGKILL)
    assert proc.returncode != 0
    assert "resident step server ended before the step did" in log.read_text()
    assert "returned non-zero exit status 1" in err


def test_a_terminals_ctrl_c_reaches_every_step_the_driver_runs(workdir):
    """A terminal's Ctrl-C reaches the whole foreground group, a job's client among it; a
    step the driver sent itself gets it from the relay instead."""
    argv = [sys.executable, "-m", "snakemake", "--cores", "2", "--config", "actions=sleep30"]
    pid, terminal = pty.fork()
    if pid == 0:  # the driver, in a terminal of its own
        os.chdir(workdir)
        os.execv(sys.executable, argv)
    log = workdir / "logs" / "sleep30.log"
    said = b""
    try:
        deadline = time.monotonic() + 60
        while not (log.exists() and log.read_text().count("\n") >= 2):
            assert time.monotonic() < deadline, said.decode(errors="replace")[-2000:]
            said += _read_ready(terminal)
        seen, _ = probe_of(workdir, "sleep30.log")
        os.write(terminal, b"\x03")
        deadline = time.monotonic() + 20  # well before the step's 30 s are up
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            assert time.monotonic() < deadline, said.decode(errors="replace")[-2000:]
            said += _read_ready(terminal)
    finally:
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(terminal)
    assert not psutil.pid_exists(seen["pid"])
    assert "KeyboardInterrupt" in log.read_text()  # the step's own SIGINT, as Python ends


def _read_ready(fd: int) -> bytes:
    ready, _, _ = select.select([fd], [], [], 0.1)
    if not ready:
        return b""
    try:
        return os.read(fd, 65536)
    except OSError:  # the terminal's other side has closed
        return b""


def test_no_job_starts_once_the_driver_relayed_a_stop(workdir):
    """A Ctrl-C Snakemake did not see (its log handler drops one that comes while it writes
    a line): the interrupted run ends its job as done, and the job after it must not run
    as if the ring went on."""
    argv = [sys.executable, "-m", "snakemake", "out/termok.after", "--cores", "2",
            "--config", "actions=termok", "deaf=1",
            "--default-resources", f"tmpdir='{workdir / 'tmp'}'"]  # fmt: skip
    proc = subprocess.Popen(argv, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    log = workdir / "logs" / "termok.log"
    deadline = time.monotonic() + 60
    while not (log.exists() and log.read_text().count("\n") >= 2):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    assert (workdir / "out" / "termok.done").exists()  # the interrupted run's job: done
    assert not (workdir / "out" / "termok.after").exists(), err[-3000:]
    assert proc.returncode != 0
    assert "ringflow: not started: the driver received SIGINT and is stopping" in err
