"""The sandbox, tried with real processes in both modes (SPEC 3 and 7.6).

Each test builds a ring-like tree under pytest's private (0700) tmp_path, plans
a run, starts the planned argv with subprocess and lets a tiny program attempt
the forbidden actions; it reports every outcome as JSON on stdout.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from ringflow import sandbox
from ringflow.errors import SandboxError
from ringflow.sandbox import SandboxRequest

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox drops to another uid: needs root"),
    pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv (util-linux) missing"),
]

NOBODY = 65534
RING_OWNER = 1234  # a non-root owner, so a restored owner cannot be mistaken for "untouched"

AGENT = r"""
import json, os, socket, sys

def status(_):
    caps = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            caps[key] = value.strip()
    return {
        "uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(), "groups": os.getgroups(),
        "CapEff": caps["CapEff"], "CapPrm": caps["CapPrm"], "CapBnd": caps["CapBnd"],
        "cwd": os.getcwd(),
    }

def read(path):
    with open(path) as f:
        return f.read()

def write(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("written by the program\n")

def remove(path):
    os.unlink(path)

def append(path):
    with open(path, "a") as f:
        f.write("changed\n")

def connect(address):
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=3):
        pass

ACTIONS = {"status": status, "read": read, "list": lambda p: sorted(os.listdir(p)),
           "write": write, "append": append, "remove": remove, "connect": connect}
results = []
for name, arg in json.loads(sys.argv[-1]):
    try:
        results.append({"ok": True, "value": ACTIONS[name](os.path.expandvars(arg))})
    except Exception as exc:
        results.append({"ok": False, "error": type(exc).__name__, "message": str(exc)})
print(json.dumps(results))
"""


def _sandbox_python() -> str | None:
    """An interpreter the sandbox user can run (the test venv may live under /root)."""
    for candidate in (sys.executable, "/usr/bin/python3"):
        usable = os.path.exists(candidate) and os.geteuid() == 0
        if usable and sandbox.interpreter_problem(candidate, NOBODY, NOBODY) is None:
            return candidate
    return None


@pytest.fixture(scope="module")
def python() -> str:
    found = _sandbox_python()
    if found is None:
        pytest.skip("no interpreter here that uid 65534 can run")
    return found


@pytest.fixture(params=["bwrap", "user-only"])
def mode(request, monkeypatch) -> str:
    if request.param == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed")
    monkeypatch.setenv("RINGFLOW_SANDBOX", request.param)
    return request.param


@dataclass
class Ring:
    """A ring-like tree: a view with labels, a store, one execution's folders."""

    root: Path
    store: Path
    labels: Path
    inputs: Path
    solution: Path
    output: Path

    @property
    def weights(self) -> Path:
        return self.solution / "weights"

    def request(self, **overrides) -> SandboxRequest:
        base = SandboxRequest(
            solution_dir=self.solution,
            input_dir=self.inputs,
            output_dir=self.output,
            progress_file=self.solution / "progress.json",
            hidden_paths=(self.labels, self.store, self.root),
        )
        return replace(base, **overrides)


def make_ring(base: Path) -> Ring:
    """Build the tree under base: folders 0755 and files 0644, whatever the umask."""
    store = base / "store"
    (store / "objects").mkdir(parents=True)
    (store / "objects" / "obj1").write_text("stored weights\n")
    root = base / "ring"
    view = root / "views" / "v1"
    (view / "labels").mkdir(parents=True)
    (view / "labels" / "labels.csv").write_text("id,label\n1,secret\n")
    (view / "inputs").mkdir()
    (view / "inputs" / "x.csv").write_text("id,x\n1,0.5\n")
    execution = root / "nodes" / "n1" / "exec" / "v1" / "s0"
    solution = execution / "solution"
    (solution / "weights").mkdir(parents=True)
    (solution / "run.py").write_text(AGENT)
    (solution / "data.txt").write_text("part of the working copy\n")
    (execution / "output").mkdir()
    for dirpath, _, filenames in os.walk(base):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), 0o644)
    return Ring(root, store, view / "labels", view / "inputs", solution, execution / "output")


@pytest.fixture
def ring(tmp_path: Path) -> Ring:
    """A ring inside a private (0700) folder, as under pytest's tmp_path."""
    private = tmp_path / "private"
    private.mkdir()
    ring = make_ring(private)
    os.chmod(private, 0o700)
    return ring


def first_closed_folder(path: Path) -> Path:
    """The first folder on the way to path that others may not traverse."""
    return next(
        folder for folder in [*reversed(path.parents), path] if not folder.stat().st_mode & 0o001
    )


def run_agent(plan: sandbox.SandboxPlan, actions: list[tuple[str, str]]) -> list[dict]:
    """Run the planned argv (the agent) and return one outcome per action."""
    done = subprocess.run(
        plan.argv,
        env=plan.env,
        cwd=plan.cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"agent failed ({done.returncode}): {done.stderr}"
    outcomes = json.loads(done.stdout)
    assert len(outcomes) == len(actions)
    return outcomes


def start(ring: Ring, python: str, request: SandboxRequest | None = None, **kwargs):
    argv = [python, "run.py", "--seed", "0"]
    base_env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
    return sandbox.plan(request or ring.request(), argv, base_env, **kwargs)


def agent_argv_with(plan: sandbox.SandboxPlan, actions: list[tuple[str, str]]):
    """The plan, with the agent's actions appended as its last argument."""
    return replace(plan, argv=[*plan.argv, json.dumps(actions)])


def attempt(plan: sandbox.SandboxPlan, actions: list[tuple[str, str]]) -> list[dict]:
    return run_agent(agent_argv_with(plan, actions), actions)


def assert_refused(outcome: dict, mode: str, what: str) -> None:
    """Hidden in bwrap mode (does not exist there); permission denied without bwrap."""
    expected = "FileNotFoundError" if mode == "bwrap" else "PermissionError"
    assert not outcome["ok"], f"{what} succeeded: {outcome}"
    assert outcome["error"] == expected, f"{what}: {outcome}"


# --- who the program is -----------------------------------------------------------------


def test_program_runs_as_sandbox_user_without_capabilities(ring, python, mode):
    plan = start(ring, python)
    try:
        assert plan.mode == mode
        (status, inputs, home) = attempt(
            plan, [("status", ""), ("read", "$RINGFLOW_INPUT_DIR/x.csv"), ("write", "$HOME/h")]
        )
    finally:
        plan.finish()
    assert status["ok"], status
    who = status["value"]
    assert (who["uid"], who["euid"], who["gid"]) == (NOBODY, NOBODY, NOBODY)
    assert who["groups"] in ([], [NOBODY])
    assert int(who["CapEff"], 16) == 0
    assert int(who["CapBnd"], 16) == 0
    assert int(who["CapPrm"], 16) == 0
    assert who["cwd"] == ("/ringflow/solution" if mode == "bwrap" else plan.cwd)
    assert inputs == {"ok": True, "value": "id,x\n1,0.5\n"}
    assert home["ok"], home


# --- what it may read -------------------------------------------------------------------


def test_labels_and_store_are_out_of_reach(ring, python, mode):
    plan = start(ring, python)
    try:
        outcomes = attempt(
            plan,
            [
                ("read", str(ring.labels / "labels.csv")),
                ("list", str(ring.labels)),
                ("read", str(ring.store / "objects" / "obj1")),
                ("list", str(ring.store / "objects")),
            ],
        )
    finally:
        plan.finish()
    for outcome, what in zip(
        outcomes, ["labels file", "labels folder", "store object", "store folder"], strict=True
    ):
        assert_refused(outcome, mode, what)


@pytest.fixture
def open_ring():
    """A ring anyone may read, outside /tmp (which bwrap replaces as a whole anyway)."""
    base = Path(tempfile.mkdtemp(prefix="ringflow-test-", dir="/var/tmp"))
    os.chmod(base, 0o755)
    yield make_ring(base)
    shutil.rmtree(base)


def test_readable_hidden_ring_is_hidden_or_refused(python, mode, open_ring):
    ring = open_ring
    request = ring.request(hidden_paths=(ring.root, ring.store))  # the execution lies inside
    actions = [
        ("read", str(ring.labels / "labels.csv")),
        ("read", str(ring.store / "objects" / "obj1")),
        ("read", "$RINGFLOW_INPUT_DIR/x.csv"),
        ("write", "$RINGFLOW_OUTPUT_DIR/pred.csv"),
    ]
    if mode == "bwrap":
        plan = start(ring, python, request)
        try:
            labels, store, inputs, output = attempt(plan, actions)
        finally:
            plan.finish()
        assert_refused(labels, mode, "world-readable labels")
        assert_refused(store, mode, "world-readable store")
        assert inputs["ok"] and output["ok"], "the execution's own folders are bound from the host"
        assert (ring.output / "pred.csv").exists()
        return
    with pytest.raises(SandboxError, match=f"readable by the sandbox user.*{ring.root}"):
        start(ring, python, request)
    assert not (ring.solution / "progress.json").exists(), "a refused plan changed nothing"
    plan = start(ring, python, replace(request, allow_readable_hidden=True))
    try:
        labels, *_ = attempt(plan, actions)
    finally:
        plan.finish()
    assert any(str(ring.root) in note for note in plan.notes), plan.notes
    assert labels["ok"], "without bubblewrap nothing hides a readable path: the note says so"


# --- what it may write ------------------------------------------------------------------


def test_working_copy_is_read_only_except_progress(ring, python, mode):
    run_py = (ring.solution / "run.py").read_text()
    # Even entries whose permission bits let anyone write stay read-only to the program.
    (ring.solution / "open.txt").write_text("open\n")
    os.chmod(ring.solution / "open.txt", 0o666)
    (ring.solution / "open_dir").mkdir()
    os.chmod(ring.solution / "open_dir", 0o777)
    plan = start(ring, python)
    try:
        inside = Path(plan.env["RINGFLOW_PROGRESS_FILE"]).parent
        *refused, progress, prediction = attempt(
            plan,
            [
                ("write", str(inside / "new.txt")),
                ("append", str(inside / "run.py")),
                ("append", str(inside / "open.txt")),
                ("write", str(inside / "open_dir" / "new.txt")),
                ("write", "$RINGFLOW_PROGRESS_FILE"),
                ("write", "$RINGFLOW_OUTPUT_DIR/pred.csv"),
            ],
        )
    finally:
        plan.finish()
    for outcome in refused:
        assert not outcome["ok"] and outcome["error"] in ("PermissionError", "OSError"), outcome
    assert (ring.solution / "open.txt").read_text() == "open\n"
    assert not (ring.solution / "open_dir" / "new.txt").exists()
    assert progress["ok"], progress
    assert prediction["ok"], prediction
    assert (ring.solution / "run.py").read_text() == run_py
    assert not (ring.solution / "new.txt").exists()
    assert (ring.solution / "progress.json").read_text() == "written by the program\n"
    assert (ring.output / "pred.csv").read_text() == "written by the program\n"


def test_untouched_progress_file_is_removed_again(ring, python, mode):
    plan = start(ring, python)
    try:
        attempt(plan, [("status", "")])
    finally:
        plan.finish()
    assert not (ring.solution / "progress.json").exists()


@pytest.mark.parametrize("training", [True, False], ids=["training", "replay"])
def test_weights_folder_is_writable_only_when_training(ring, python, mode, training):
    partial = ring.weights / "partial.ckpt"
    partial.write_text("half-trained\n")
    for path in (ring.weights, partial):
        os.chown(path, RING_OWNER, RING_OWNER)
    writable = (ring.weights,) if training else ()
    plan = start(ring, python, ring.request(writable_dirs=writable), weights_dir_rel="weights")
    try:
        write, remove = attempt(
            plan,
            [
                ("write", "$RINGFLOW_WEIGHTS_DIR/model.bin"),
                ("remove", "$RINGFLOW_WEIGHTS_DIR/partial.ckpt"),
            ],
        )
    finally:
        plan.finish()
    written = ring.weights / "model.bin"
    if training:
        assert write["ok"] and remove["ok"], (write, remove)
        assert written.read_text() == "written by the program\n"
        assert (written.stat().st_uid, written.stat().st_gid) == (RING_OWNER, RING_OWNER)
        assert ring.weights.stat().st_uid == RING_OWNER
        assert not partial.exists()
    else:
        for outcome in (write, remove):
            assert not outcome["ok"] and outcome["error"] in ("PermissionError", "OSError"), outcome
        assert not written.exists()
        assert partial.read_text() == "half-trained\n"
        assert partial.stat().st_uid == RING_OWNER


def test_output_comes_back_owned_by_its_owner(ring, python, mode):
    os.chown(ring.output, RING_OWNER, RING_OWNER)
    plan = start(ring, python)
    try:
        outcomes = attempt(
            plan,
            [
                ("write", "$RINGFLOW_OUTPUT_DIR/pred.csv"),
                ("write", "$RINGFLOW_OUTPUT_DIR/sub/deep.txt"),
            ],
        )
        assert all(o["ok"] for o in outcomes), outcomes
    finally:
        plan.finish()
    plan.finish()  # idempotent
    for path in (
        ring.output,
        ring.output / "pred.csv",
        ring.output / "sub",
        ring.output / "sub" / "deep.txt",
    ):
        st = path.lstat()
        assert (st.st_uid, st.st_gid) == (RING_OWNER, RING_OWNER), path
    assert (ring.output / "sub" / "deep.txt").read_text() == "written by the program\n"
    if mode == "user-only":
        assert not Path(plan.cwd).exists(), "the stage is removed"


# --- network ----------------------------------------------------------------------------


@pytest.fixture
def listener():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    yield f"127.0.0.1:{server.getsockname()[1]}"
    server.close()


@pytest.mark.parametrize("blind", [True, False], ids=["blind", "sighted"])
def test_network_is_cut_when_blind(ring, python, mode, listener, blind):
    plan = start(ring, python, ring.request(blind=blind))
    try:
        (outcome,) = attempt(plan, [("connect", listener)])
    finally:
        plan.finish()
    if mode == "bwrap":
        assert plan.network_isolated is blind
        assert outcome["ok"] is not blind, outcome
    else:
        assert plan.network_isolated is False
        assert any("network isolation lost" in note for note in plan.notes), plan.notes
        assert outcome["ok"], "without bubblewrap the network stays reachable"


# --- refusals ---------------------------------------------------------------------------


def test_hardlinked_weights_are_refused_before_anything_changes(ring, python, mode):
    stored = ring.store / "objects" / "obj1"
    os.link(stored, ring.weights / "model.bin")
    with pytest.raises(SandboxError, match="hard links"):
        start(ring, python, ring.request(writable_dirs=(ring.weights,)))
    assert stored.stat().st_uid == 0, "the store object was not lent to the sandbox user"
    assert ring.output.stat().st_uid == 0
    assert not (ring.solution / "progress.json").exists()


def test_symlinked_progress_file_is_refused(ring, python, mode, tmp_path):
    (tmp_path / "elsewhere").write_text("{}")
    (ring.solution / "progress.json").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(SandboxError, match="regular file"):
        start(ring, python)
    assert (tmp_path / "elsewhere").stat().st_uid == 0


def test_unreachable_interpreter_names_the_folder(ring, python, mode):
    venv_bin = ring.root.parent / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "python").symlink_to(python)
    blocked = first_closed_folder(ring.root)
    with pytest.raises(SandboxError, match=f"folder {blocked} is not traversable"):
        sandbox.plan(ring.request(), [str(venv_bin / "python"), "run.py"], {})


def test_unknown_sandbox_mode_is_refused(ring, python, monkeypatch):
    monkeypatch.setenv("RINGFLOW_SANDBOX", "docker")
    with pytest.raises(SandboxError, match="RINGFLOW_SANDBOX='docker'"):
        start(ring, python)


# --- user-only staging ------------------------------------------------------------------


def test_user_only_stage_links_read_only_files(ring, python, monkeypatch):
    monkeypatch.setenv("RINGFLOW_SANDBOX", "user-only")
    plan = start(ring, python)
    try:
        staged = Path(plan.cwd)
        assert (staged / "data.txt").stat().st_ino == (ring.solution / "data.txt").stat().st_ino
        assert stat.S_IMODE(staged.parent.parent.stat().st_mode) == 0o711
        assert staged.stat().st_uid == 0 and stat.S_IMODE(staged.stat().st_mode) == 0o755
    finally:
        plan.finish()
    assert not staged.parent.exists()


def test_user_only_stage_out_of_reach_is_named(ring, python, monkeypatch):
    monkeypatch.setenv("RINGFLOW_SANDBOX", "user-only")
    blocked = first_closed_folder(ring.root)
    with pytest.raises(SandboxError, match=f"folder {blocked} is not traversable"):
        start(ring, python, ring.request(staging_root=ring.root.parent / "stage"))
    assert list((ring.root.parent / "stage").iterdir()) == [], "the failed stage was removed"
    assert not (ring.solution / "progress.json").exists()


@pytest.fixture
def broken_bwrap(tmp_path, monkeypatch):
    """A bwrap first on PATH that fails the way a locked-down kernel makes it fail."""
    fake = tmp_path / "fakebin" / "bwrap"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ.get('PATH', os.defpath)}")
    monkeypatch.delenv("RINGFLOW_SANDBOX", raising=False)
    return fake


def test_failed_bwrap_probe_falls_back_to_user_only(ring, python, broken_bwrap):
    info = sandbox.probe()
    assert info["bwrap"] is False
    assert "No permissions to create new namespace" in info["bwrap_reason"]
    plan = start(ring, python)
    try:
        (status,) = attempt(plan, [("status", "")])
    finally:
        plan.finish()
    assert plan.mode == "user-only" and plan.network_isolated is False
    assert any("No permissions to create new namespace" in note for note in plan.notes)
    assert status["value"]["uid"] == NOBODY


def test_required_bwrap_that_fails_is_an_error(ring, python, broken_bwrap, monkeypatch):
    monkeypatch.setenv("RINGFLOW_SANDBOX", "bwrap")
    with pytest.raises(SandboxError, match="RINGFLOW_SANDBOX=bwrap but bubblewrap does not work"):
        start(ring, python)


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")
def test_working_bwrap_is_chosen_by_default(ring, python, monkeypatch):
    monkeypatch.delenv("RINGFLOW_SANDBOX", raising=False)
    plan = start(ring, python)
    plan.finish()
    assert plan.mode == "bwrap", sandbox.probe()["bwrap_reason"]


def test_probe_reports_and_caches(monkeypatch):
    monkeypatch.setenv("RINGFLOW_SANDBOX", "user-only")
    info = sandbox.probe()
    assert info["bwrap"] is False and "user-only" in info["bwrap_reason"]
    assert info["net_isolation"] is False
    assert info["setpriv"] == shutil.which("setpriv")
    assert sandbox.probe() == info
