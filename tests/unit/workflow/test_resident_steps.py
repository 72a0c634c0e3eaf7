"""The resident step server: a job's step runs in a fork of it as it ran in the job's own
process (docs/architecture.md#resident-steps)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ringflow.core import clock
from ringflow.core.jsonio import atomic_write_json
from ringflow.ring.lock import lock_ring
from ringflow.workflow import resident_client
from ringflow.workflow.resident_client import (
    SERVER_ENV,
    run_through_server,
    step_command,
    wants_server,
)
from ringflow.workflow.resident_steps import Request, _read_ahead, start_server
from ringtools import scripted_config

PROBE = textwrap.dedent("""\
    import json, os, signal, sys, time

    def main():
        threads = [line for line in open("/proc/self/status") if line.startswith("Threads:")]
        mask = os.umask(0)
        os.umask(mask)
        print(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "sid": os.getsid(0),
                          "argv": sys.argv[1:], "cwd": os.getcwd(), "umask": mask,
                          "probe": os.environ.get("PROBE"), "threads": threads[0].split()[1],
                          "server": os.environ.get("RINGFLOW_STEP_SERVER"),
                          "path0": sys.path[0]}), flush=True)
        print("to stderr", file=sys.stderr)
        action = os.environ.get("PROBE_ACTION", "")
        if os.environ.get("PROBE_MARK"):
            open(os.environ["PROBE_MARK"], "w").close()
        if action.startswith("exit"):
            return int(action[4:])
        if action.startswith("sleep"):
            time.sleep(float(action[5:]))
        if action == "term":
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))
            time.sleep(30)
        if action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        return 0
    """)


def install_probe(tmp_path: Path, monkeypatch, text: str = PROBE) -> Path:
    """`resident_probe.main` on the import path of every process started from here."""
    folder = tmp_path / "probe"
    folder.mkdir()
    (folder / "resident_probe.py").write_text(text)
    monkeypatch.setenv("PYTHONPATH", str(folder))
    return folder


@pytest.fixture
def probe_path(tmp_path, monkeypatch):
    return install_probe(tmp_path, monkeypatch)


@pytest.fixture
def server(probe_path, monkeypatch):
    monkeypatch.delenv(SERVER_ENV, raising=False)
    started = start_server("resident_probe:main")
    assert started is not None
    yield started
    started.stop()


RULE_STEP = step_command(sys.executable)  # what the rules run: the client as a script
MODULE_STEP = [sys.executable, "-m", "ringflow", "step"]  # the same step by hand


def job(argv=("execute", "a", "b"), env=None, step=RULE_STEP, **kwargs) -> subprocess.Popen:
    """A job's command, as the execute rule gives it."""
    return subprocess.Popen([*step, *argv], env={**os.environ, **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **kwargs)  # fmt: skip


@pytest.mark.parametrize("step", [RULE_STEP, MODULE_STEP], ids=["rule", "module"])
def test_a_step_runs_in_a_fork_of_the_server_as_the_jobs_own_process_would(server, tmp_path, step):
    folder = tmp_path / "work"
    folder.mkdir()
    proc = subprocess.Popen(
        ["sh", "-c", f"umask 027; exec {shlex.join(step)} execute x y"],
        cwd=folder, env={**os.environ, "PROBE": "seen"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    seen = json.loads(out)
    assert seen["ppid"] == server.proc.pid  # the server's fork, not a process of the job
    assert seen["ppid"] != proc.pid and seen["pid"] != proc.pid
    assert seen["sid"] == seen["pid"]
    assert seen["threads"] == "1"  # the sandbox forks to make its user namespace
    assert seen["argv"] == ["step", "execute", "x", "y"]
    assert seen["cwd"] == str(folder)
    assert seen["umask"] == 0o027
    assert seen["probe"] == "seen"
    assert seen["server"] is None  # neither the step nor what it starts sees the server
    assert seen["path0"] == str(folder)  # the import path `python -m` gives: its folder first
    assert err.strip() == "to stderr"


@pytest.mark.parametrize("action, code", [("exit0", 0), ("exit3", 3), ("kill", -signal.SIGKILL)])
def test_the_job_ends_as_its_step_ended(server, action, code):
    proc = job(env={"PROBE_ACTION": action})
    proc.communicate(timeout=30)
    assert proc.returncode == code


def test_a_signal_to_the_job_reaches_its_step(server):
    proc = job(env={"PROBE_ACTION": "term"})
    json.loads(proc.stdout.readline())  # the step runs and has its handler
    time.sleep(0.3)
    proc.terminate()
    proc.communicate(timeout=30)
    assert proc.returncode == 7  # the step's own handler ran


def test_a_killed_job_takes_its_step_with_it(server):
    proc = job(env={"PROBE_ACTION": "sleep30"})
    step = json.loads(proc.stdout.readline())["pid"]
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _alive(step):
        time.sleep(0.05)
    assert not _alive(step)


def test_a_job_whose_server_dies_mid_step_fails_loudly_after_its_step(server):
    proc = job(env={"PROBE_ACTION": "sleep1"})
    json.loads(proc.stdout.readline())
    os.kill(server.proc.pid, signal.SIGKILL)
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == resident_client.EXIT_LOST
    assert "resident step server ended before the step did" in err


def test_a_request_the_server_refuses_runs_nothing_and_falls_back(server, tmp_path, monkeypatch):
    mark = tmp_path / "ran"
    monkeypatch.setenv("PROBE_MARK", str(mark))
    monkeypatch.setattr(sys, "executable", "/elsewhere/bin/python")
    assert run_through_server(server.path, ["ringflow", "step", "execute"]) is None
    time.sleep(0.3)
    assert not mark.exists()


@pytest.mark.parametrize("step", [RULE_STEP, MODULE_STEP], ids=["rule", "module"])
@pytest.mark.parametrize("why", ["gone", "none", "slurm"])
def test_without_a_server_the_job_runs_its_step_itself(server, step, why):
    path = server.path
    server.stop()
    assert run_through_server(path, ["ringflow", "step", "execute"]) is None
    env = {"gone": {SERVER_ENV: path}, "none": {}, "slurm": {SERVER_ENV: path, "SLURM_JOB_ID": "7"}}
    proc = job(("execute", "--help"), env=env[why], step=step)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "usage: ringflow step execute" in out, err


def test_the_steps_but_an_engineers_session_outside_slurm_jobs_use_the_server():
    env = {SERVER_ENV: "/run/s"}
    assert wants_server(["step", "execute", "r"], env) == "/run/s"
    assert wants_server(["step", "key-target", "r"], env) == "/run/s"
    assert wants_server(["step", "summary", "r"], env) == "/run/s"
    assert wants_server(["step", "lock-ring", "r"], env) == "/run/s"
    assert wants_server(["step", "engineer", "r", "n001"], env) is None
    assert wants_server(["status", "r"], env) is None
    assert wants_server(["step"], env) is None
    assert wants_server(["step", "execute"], {}) is None
    assert wants_server(["step", "execute"], {**env, "SLURM_JOB_ID": "12"}) is None


def test_a_real_step_gives_the_same_answer_through_the_server(tmp_path, monkeypatch):
    monkeypatch.delenv(SERVER_ENV, raising=False)
    argv = ("execute", str(tmp_path / "no-ring"), "n", "v", "seed0",
            "--result", str(tmp_path / "r.json"), "--score", str(tmp_path / "s.json"))  # fmt: skip
    fresh = job(argv)
    fresh_out = fresh.communicate(timeout=60)
    server = start_server()
    assert server is not None
    try:
        resident = job(argv)
        resident_out = resident.communicate(timeout=60)
    finally:
        server.stop()
    assert fresh.returncode != 0
    assert (resident.returncode, resident_out) == (fresh.returncode, fresh_out)


def test_the_server_ends_with_its_driver_and_leaves_nothing(server):
    folder = Path(server.folder)
    assert os.environ[SERVER_ENV] == server.path
    server.stop()
    assert server.proc.returncode == 0
    assert not folder.exists()
    assert SERVER_ENV not in os.environ


def test_a_killed_driver_takes_the_server_with_it(probe_path, tmp_path):
    report = tmp_path / "server.json"
    driver = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""\
        import json, time
        from ringflow.workflow.resident_steps import start_server
        server = start_server("resident_probe:main")
        open({str(report)!r}, "w").write(json.dumps([server.proc.pid, server.folder]))
        time.sleep(60)
        """)])  # fmt: skip
    deadline = time.monotonic() + 30
    while not report.exists() or not report.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    pid, folder = json.loads(report.read_text())
    driver.kill()
    driver.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (_alive(pid) or Path(folder).exists()):
        time.sleep(0.05)
    assert not _alive(pid)
    assert not Path(folder).exists()


def test_the_user_can_turn_it_off(monkeypatch):
    monkeypatch.setenv("RINGFLOW_RESIDENT_STEPS", "0")
    monkeypatch.delenv(SERVER_ENV, raising=False)
    assert start_server() is None
    assert SERVER_ENV not in os.environ


def _alive(pid: int) -> bool:
    """Running, and not a zombie waiting for its parent."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):  # gone before or during the read
        return False
    return state != "Z"


@pytest.mark.skipif(os.geteuid() != 0, reason="takes another uid: root only")
def test_another_user_is_refused_even_where_the_folder_lets_them_in(server, tmp_path):
    mark = tmp_path / "ran"
    tmp_path.chmod(0o777)
    os.chmod(server.folder, 0o711)  # the folder's 0700 is the first wall: open it
    os.chmod(server.path, 0o777)
    probe = textwrap.dedent(f"""\
        import os
        from ringflow.workflow.resident_client import run_through_server  # while root can
        os.setgid(65534)
        os.setuid(65534)
        code = run_through_server({server.path!r}, ["ringflow", "step", "execute"])
        print("refused" if code is None else f"ran: {{code}}")
        """)  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env={**os.environ, "PROBE_MARK": str(mark)}, timeout=30)  # fmt: skip
    assert proc.stdout.strip() == "refused", proc.stderr
    time.sleep(0.3)
    assert not mark.exists()


def test_a_malformed_request_is_refused_and_the_server_serves_on(server):
    import socket

    sized = (100).to_bytes(4, "big")
    payloads = (b"\xff\xff\xff\xff", (14).to_bytes(4, "big") + b"not ringflow\0x",
                sized + b"short", sized + b"stalls")  # fmt: skip
    for payload in payloads:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(server.path)
            sock.sendall(payload)
            if payload.endswith(b"short"):
                sock.shutdown(socket.SHUT_WR)  # the request ends early
            sock.settimeout(10)
            assert sock.recv(256).startswith(b"R")
    proc = job(env={"PROBE_ACTION": "exit3"})
    proc.communicate(timeout=30)
    assert proc.returncode == 3
    assert server.proc.poll() is None


def test_the_server_reads_a_rings_lock_ahead_of_its_forks(tmp_path):
    ring = lock_ring(scripted_config(tmp_path, "ahead"), tmp_path)
    lock = Path(ring.ring_dir) / "RING.json"
    os.utime(lock, (time.time() - 5,) * 2)  # settled: remembered once parsed

    def request(*argv: str, cwd: Path = tmp_path) -> Request:
        fields = [resident_client.PROTOCOL, os.fsencode(sys.executable), os.fsencode(cwd),
                  b"18", b"%d" % (len(argv) + 1), b"ringflow", *map(os.fsencode, argv),
                  b"0", b"0"]  # fmt: skip
        return Request(b"\0".join(fields))

    clock._parsed.pop(str(lock), None)
    _read_ahead(request("step", "execute", os.path.relpath(ring.ring_dir, tmp_path), "n", "v"))
    assert str(lock) in clock._parsed  # by a path relative to the job's folder
    # Not a ring's step, not a ring, or a lock that does not parse: left to the step.
    _read_ahead(request("step", "lock-ring", str(tmp_path / "none")))
    _read_ahead(request("status"))
    broken = tmp_path / "broken"
    atomic_write_json(broken / "RING.json", {"ring_id": 3})
    _read_ahead(request("step", "execute", str(broken), "n"))
    assert str(broken / "RING.json") not in clock._parsed
