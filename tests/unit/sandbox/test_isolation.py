"""No kernel state passes between runs (docs/isolation.md), tried with real sandboxes.

A probe program stores what it can where the kernel keeps state outside the file system
(a key in its user and its session keyring, a SysV shared memory segment, an abstract Unix
socket), and a second run, later or at the same time, looks for it. As root each run has a user
namespace and a host uid of its own; as an ordinary user, bubblewrap's user namespace.
CI runs this file both ways.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ringflow import sandbox
from ringflow.sandbox import SandboxRequest
from ringflow.sandbox.identity import HOST_UIDS
from ringflow.sandbox.interpreter import describe_interpreter
from ringflow.sandbox.probe import require_sandbox
from ringtools import sandbox_settings

pytestmark = pytest.mark.sandbox

ROOT = os.geteuid() == 0
SETTINGS = sandbox_settings(mode="auto", uid=65534, gid=65534)
# (add_key, keyctl) by machine.
SYSCALLS = {"x86_64": (248, 250), "aarch64": (217, 219)}

PROBE = r"""
import ctypes, json, os, socket, sys, time
add_key, keyctl = json.loads(sys.argv[2])
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
SESSION_KEYRING, USER_KEYRING, KEYCTL_SEARCH, SHM_KEY = -3, -4, 10, 0x52460001
out = os.environ["RINGFLOW_OUTPUT_DIR"]

def search():
    return all(libc.syscall(keyctl, KEYCTL_SEARCH, ctypes.c_int(ring), b"user",
                            b"ringflow-probe", ctypes.c_long(0)) >= 0
               for ring in (USER_KEYRING, SESSION_KEYRING))

def shm_exists():
    return libc.shmget(SHM_KEY, 0, 0) >= 0

report = {}
if sys.argv[1] in ("plant", "hold"):
    report["added"] = all(
        libc.syscall(add_key, b"user", b"ringflow-probe", b"guard rows", ctypes.c_long(10),
                     ctypes.c_int(ring)) >= 0
        for ring in (USER_KEYRING, SESSION_KEYRING))
    report["own_key_found"] = search()
    report["shm_made"] = libc.shmget(SHM_KEY, 4096, 0o1666) >= 0
    report["own_shm_found"] = shm_exists()
if sys.argv[1] == "hold":
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0ringflow-probe")
    listener.listen(1)
    report["abstract_bound"] = True
    with open(os.path.join(out, "ready.tmp"), "w") as f:
        json.dump(report, f)
    os.rename(os.path.join(out, "ready.tmp"), os.path.join(out, "ready.json"))
    time.sleep(120)
if sys.argv[1] == "nest":
    report["nested_user_namespace"] = libc.unshare(0x10000000) == 0
if sys.argv[1] == "look":
    report["key_found"] = any(
        libc.syscall(keyctl, KEYCTL_SEARCH, ctypes.c_int(ring), b"user", b"ringflow-probe",
                     ctypes.c_long(0)) >= 0
        for ring in (USER_KEYRING, SESSION_KEYRING))
    report["shm_found"] = shm_exists()
    try:
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect("\0ringflow-probe")
        report["abstract_reached"] = True
    except OSError:
        report["abstract_reached"] = False
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def info() -> dict:
    return require_sandbox(SETTINGS)


@pytest.fixture(scope="module")
def program() -> dict:
    return describe_interpreter(sys.executable)


@pytest.fixture(scope="module")
def syscalls():
    """The probe's syscall numbers; and this process in a session keyring of its own, as a
    ringflow started from a login session is (which every run would inherit)."""
    numbers = SYSCALLS.get(platform.machine())
    if numbers is None:
        pytest.skip(f"no keyring syscall numbers known for {platform.machine()}")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    assert libc.syscall(numbers[1], 1, b"ringflow-tests") >= 0, os.strerror(ctypes.get_errno())
    return json.dumps(numbers)


def make_run(base: Path, name: str, program: dict) -> SandboxRequest:
    box = base / name
    (box / "solution").mkdir(parents=True)
    (box / "inputs").mkdir()
    (box / "output").mkdir()
    (box / "solution" / "probe.py").write_text(PROBE)
    for dirpath, _, files in os.walk(base):
        os.chmod(dirpath, 0o755)
        for file in files:
            os.chmod(Path(dirpath, file), 0o644)
    return SandboxRequest(
        solution_dir=box / "solution",
        input_dir=box / "inputs",
        output_dir=box / "output",
        progress_file=box / "solution" / "progress.json",
        environment_dirs=tuple(Path(d) for d in program["dirs"]),
    )


def plan(request: SandboxRequest, info: dict, program: dict, *args: str):
    argv = [program["executable"], "probe.py", *args]
    return sandbox.plan(request, argv, {"PATH": "/usr/bin:/bin"}, info)


def run(request, info, program, *args: str) -> dict:
    confined = plan(request, info, program, *args)
    try:
        confined.spawn_setup()
        done = subprocess.run(
            confined.argv, env=confined.env, cwd=confined.cwd, capture_output=True,
            text=True, timeout=60, pass_fds=confined.pass_fds, check=False,
        )  # fmt: skip
        confined.confirm_started()
    finally:
        confined.finish()
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_key_or_segment_left_by_one_run_is_not_in_the_next(tmp_path, info, program, syscalls):
    planted = run(make_run(tmp_path, "a", program), info, program, "plant", syscalls)
    # The probe works: the run sees its own key and segment.
    assert planted == {"added": True, "own_key_found": True, "shm_made": True,
                       "own_shm_found": True}  # fmt: skip
    looked = run(make_run(tmp_path, "b", program), info, program, "look", syscalls)
    assert looked == {"key_found": False, "shm_found": False, "abstract_reached": False}


def test_runs_at_the_same_time_share_no_key_segment_or_abstract_socket(
    tmp_path, info, program, syscalls
):
    holder_request = make_run(tmp_path, "holder", program)
    holder = plan(holder_request, info, program, "hold", syscalls)
    holder.spawn_setup()
    proc = subprocess.Popen(
        holder.argv, env=holder.env, cwd=holder.cwd, pass_fds=holder.pass_fds,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        ready = holder_request.output_dir / "ready.json"
        deadline = time.monotonic() + 60
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), proc.stderr.read() if proc.poll() is not None else "not ready"
        held = json.loads(ready.read_text())
        assert held["own_key_found"] and held["own_shm_found"] and held["abstract_bound"]
        looked = run(make_run(tmp_path, "looker", program), info, program, "look", syscalls)
        assert looked == {"key_found": False, "shm_found": False, "abstract_reached": False}
    finally:
        proc.kill()
        proc.wait()
        holder.finish()


def test_the_result_says_what_kept_the_runs_apart(tmp_path, info, program):
    first = plan(make_run(tmp_path, "a", program), info, program)
    second = plan(make_run(tmp_path, "b", program), info, program)
    try:
        for confined in (first, second):
            assert confined.isolation["kernel_state"] == "user-namespace"
        if ROOT:
            hosts = {confined.isolation["host_uid"] for confined in (first, second)}
            assert len(hosts) == 2, "two runs at once hold one host uid"
            low, count = HOST_UIDS["first"], HOST_UIDS["count"]
            assert all(low <= uid < low + count for uid in hosts)
        else:
            assert first.isolation["host_uid"] == os.getuid()
    finally:
        first.finish()
        second.finish()


@pytest.mark.skipif(not ROOT, reason="host uids are claimed as root only")
def test_what_the_program_writes_belongs_to_its_host_uid_during_the_run(tmp_path, info, program):
    request = make_run(tmp_path, "a", program)
    (request.solution_dir / "probe.py").write_text(
        "import os\nopen(os.environ['RINGFLOW_OUTPUT_DIR'] + '/made', 'w').write('x')\n"
        "print(os.getuid(), os.stat(os.environ['RINGFLOW_OUTPUT_DIR']).st_uid)\n"
    )
    confined = plan(request, info, program)
    host = confined.isolation["host_uid"]
    try:
        assert request.output_dir.stat().st_uid == host
        confined.spawn_setup()
        done = subprocess.run(
            confined.argv, env=confined.env, cwd=confined.cwd, capture_output=True,
            text=True, timeout=60, pass_fds=confined.pass_fds, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        # Inside it is sandbox.uid, and its folder is its own.
        assert done.stdout.split() == ["65534", "65534"]
        assert (request.output_dir / "made").stat().st_uid == host
    finally:
        confined.finish()
    assert (request.output_dir / "made").stat().st_uid == os.getuid()


@pytest.mark.skipif(not ROOT, reason="as an ordinary user every run has bubblewrap's namespace")
def test_without_a_namespace_the_keyring_calls_are_refused_and_recorded(
    tmp_path, info, program, syscalls
):
    # What a root-mode ring gets where no user namespace can be made (the probe says so).
    shared = {**info, "kernel_state": "seccomp", "kernel_state_why": "no user namespace: test"}
    confined = plan(make_run(tmp_path, "probe", program), shared, program)
    assert confined.isolation == {"kernel_state": "seccomp", "host_uid": 65534,
                                  "kernel_state_why": "no user namespace: test"}  # fmt: skip
    confined.finish()
    planted = run(make_run(tmp_path, "a", program), shared, program, "plant", syscalls)
    assert planted["added"] is False and planted["own_key_found"] is False
    assert planted["shm_made"] and planted["own_shm_found"]  # everything else still works
    looked = run(make_run(tmp_path, "b", program), shared, program, "look", syscalls)
    assert looked == {"key_found": False, "shm_found": False, "abstract_reached": False}


def test_no_user_namespace_can_be_made_inside(tmp_path, info, program, syscalls):
    nested = run(make_run(tmp_path, "a", program), info, program, "nest", syscalls)
    assert nested == {"nested_user_namespace": False}
