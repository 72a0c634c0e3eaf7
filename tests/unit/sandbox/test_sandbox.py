"""The sandbox, tried with real processes (docs/contracts.md#sandbox).

Each test builds a ring-like tree under pytest's private (0700) tmp_path, plans a run,
starts the planned argv with subprocess and lets a tiny program attempt the forbidden
actions; it reports every outcome as JSON on stdout. The mode is this process's own: as
root the program drops to uid 65534 inside bubblewrap; as an ordinary user it runs in a
user namespace (CI runs this file both ways).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from ringflow import sandbox
from ringflow.core.errors import SandboxError
from ringflow.sandbox import SandboxRequest
from ringflow.sandbox.interpreter import describe_interpreter
from ringflow.sandbox.probe import require_sandbox
from ringtools import sandbox_settings

pytestmark = pytest.mark.sandbox

ROOT = os.geteuid() == 0
NOBODY = 65534
RING_OWNER = 1234  # a non-root owner, so a restored owner cannot be mistaken for "untouched"
SETTINGS = sandbox_settings(mode="auto", uid=NOBODY, gid=NOBODY)

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

def fill(spec):
    path, mb = spec.rsplit(":", 1)
    with open(path, "wb") as f:
        for _ in range(int(mb)):
            f.write(b"x" * (1 << 20))

def fork(count):
    import subprocess
    procs = [subprocess.Popen(["sleep", "5"]) for _ in range(int(count))]
    for p in procs:
        p.kill()
    return len(procs)

def environ(_):
    return dict(os.environ)

ACTIONS = {"status": status, "read": read, "list": lambda p: sorted(os.listdir(p)),
           "write": write, "append": append, "remove": remove, "connect": connect,
           "fill": fill, "fork": fork, "environ": environ}
results = []
for name, arg in json.loads(sys.argv[-1]):
    try:
        results.append({"ok": True, "value": ACTIONS[name](os.path.expandvars(arg))})
    except Exception as exc:
        results.append({"ok": False, "error": type(exc).__name__, "message": str(exc)})
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def info() -> dict:
    """The sandbox this machine gives this user; CI installs bubblewrap, so it must work."""
    return require_sandbox(SETTINGS)


@pytest.fixture(scope="module")
def program() -> dict:
    return describe_interpreter(sys.executable)


@dataclass
class Ring:
    """A ring-like tree: a view with labels, a store, one execution's folders."""

    root: Path
    store: Path
    labels: Path
    inputs: Path
    solution: Path
    output: Path
    program: dict

    @property
    def weights(self) -> Path:
        return self.solution / "weights"

    def request(self, **overrides) -> SandboxRequest:
        base = SandboxRequest(
            solution_dir=self.solution,
            input_dir=self.inputs,
            output_dir=self.output,
            progress_file=self.solution / "progress.json",
            environment_dirs=tuple(Path(d) for d in self.program["dirs"]),
            hidden_paths=(self.root, self.store),
        )
        return replace(base, **overrides)


def make_ring(base: Path, program: dict) -> Ring:
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
    execution = root / "boxes" / "b1"
    solution = execution / "solution"
    (solution / "weights").mkdir(parents=True)
    (solution / "run.py").write_text(AGENT)
    (solution / "data.txt").write_text("part of the working copy\n")
    (execution / "output").mkdir()
    for dirpath, _, filenames in os.walk(base):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), 0o644)
    return Ring(root, store, view / "labels", view / "inputs", solution, execution / "output",
                program)  # fmt: skip


@pytest.fixture
def ring(tmp_path: Path, program) -> Ring:
    """A ring inside a private (0700) folder, as under pytest's tmp_path."""
    private = tmp_path / "private"
    private.mkdir()
    ring = make_ring(private, program)
    os.chmod(private, 0o700)
    return ring


def run_agent(plan: sandbox.SandboxPlan, actions: list[tuple[str, str]]) -> list[dict]:
    """Run the planned argv (the agent) and return one outcome per action."""
    plan.spawn_setup()
    done = subprocess.run(
        plan.argv, env=plan.env, cwd=plan.cwd, capture_output=True, text=True, timeout=60,
        check=False, pass_fds=plan.pass_fds,
    )  # fmt: skip
    plan.confirm_started()
    assert done.returncode == 0, f"agent failed ({done.returncode}): {done.stderr}"
    outcomes = json.loads(done.stdout)
    assert len(outcomes) == len(actions)
    return outcomes


def start(ring: Ring, info: dict, request: SandboxRequest | None = None, **kwargs):
    argv = [ring.program["executable"], "run.py", "--seed", "0"]
    base_env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
    return sandbox.plan(request or ring.request(), argv, base_env, info, **kwargs)


def attempt(plan: sandbox.SandboxPlan, actions: list[tuple[str, str]]) -> list[dict]:
    with_actions = replace(plan, argv=[*plan.argv, json.dumps(actions)])
    with_actions._status_read, with_actions.status_fd = plan._status_read, plan.status_fd
    plan._status_read = plan.status_fd = None
    try:
        return run_agent(with_actions, actions)
    finally:
        with_actions.finish()


def assert_refused(outcome: dict, what: str) -> None:
    """Not visible at all: the path does not exist inside."""
    assert not outcome["ok"], f"{what} succeeded: {outcome}"
    assert outcome["error"] in ("FileNotFoundError", "PermissionError"), f"{what}: {outcome}"


# --- who the program is -----------------------------------------------------------------


def test_program_runs_unprivileged_without_capabilities(ring, info):
    plan = start(ring, info)
    try:
        assert plan.mode == ("root" if ROOT else "userns")
        (status, inputs, home) = attempt(
            plan, [("status", ""), ("read", "$RINGFLOW_INPUT_DIR/x.csv"), ("write", "$HOME/h")]
        )
    finally:
        plan.finish()
    who = status["value"]
    expected = NOBODY if ROOT else os.getuid()
    assert (who["uid"], who["euid"]) == (expected, expected)
    assert int(who["CapEff"], 16) == 0 and int(who["CapPrm"], 16) == 0
    assert int(who["CapBnd"], 16) == 0 or not ROOT
    assert who["cwd"] == "/ringflow/solution"
    assert inputs == {"ok": True, "value": "id,x\n1,0.5\n"}
    assert home["ok"], home


# --- what it may read -------------------------------------------------------------------


def test_only_system_folders_and_its_own_are_visible(ring, info, tmp_path):
    home = Path(os.path.expanduser("~"))
    data = tmp_path / "data"
    data.mkdir()
    (data / "shared.csv").write_text("undeclared\n")
    folders = [ring.labels, ring.root, ring.store, home, data, Path("/srv"), Path("/var"),
               Path("/home"), Path("/work")]  # fmt: skip
    files = [ring.labels / "labels.csv", ring.store / "objects" / "obj1", data / "shared.csv"]
    plan = start(ring, info)
    try:
        top, ringflow, *listed = attempt(
            plan,
            [("list", "/"), ("list", "/ringflow"), *(("list", str(f)) for f in folders)],
        )
        hidden = attempt(plan_again(ring, info), [("read", str(p)) for p in files])
    finally:
        plan.finish()
    allowed = {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "opt", "dev",
               "proc", "tmp", "ringflow"}  # fmt: skip
    assert set(top["value"]) <= allowed | way_to_interpreter(ring, Path("/")), top
    assert set(ringflow["value"]) == {"solution", "inputs", "output"}
    for folder, outcome in zip(folders, listed, strict=True):
        # Only the way to the interpreter's install (bound at its host path) shows.
        assert not outcome["ok"] or set(outcome["value"]) <= way_to_interpreter(ring, folder), (
            folder,
            outcome,
        )
    for outcome in hidden:
        assert_refused(outcome, "a hidden path")


def way_to_interpreter(ring: Ring, folder: Path) -> set[str]:
    return {
        Path(d).relative_to(folder).parts[0]
        for d in ring.program["dirs"]
        if Path(d).is_relative_to(folder) and Path(d) != folder
    }


def plan_again(ring: Ring, info: dict) -> sandbox.SandboxPlan:
    return start(ring, info)


def test_a_declared_mount_is_read_only_and_visible(ring, info, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "shared.csv").write_text("declared\n")
    os.chmod(tmp_path, 0o755)
    plan = start(ring, info, ring.request(mounts=(data,)))
    try:
        read, write = attempt(
            plan, [("read", str(data / "shared.csv")), ("write", str(data / "new.csv"))]
        )
    finally:
        plan.finish()
    assert read == {"ok": True, "value": "declared\n"}
    assert not write["ok"] and not (data / "new.csv").exists()


def test_environment_holds_no_supervision_token_or_host_path(ring, info):
    plan = start(ring, info)
    try:
        (env,) = attempt(plan, [("environ", "")])
    finally:
        plan.finish()
    values = env["value"]
    assert not any("SUPERVISION" in k for k in values)
    for value in values.values():
        assert str(ring.root) not in value and str(ring.root.parent) not in value


# --- what it may write ------------------------------------------------------------------


def test_working_copy_is_read_only_except_progress(ring, info):
    run_py = (ring.solution / "run.py").read_text()
    (ring.solution / "open.txt").write_text("open\n")
    os.chmod(ring.solution / "open.txt", 0o666)
    plan = start(ring, info)
    try:
        inside = Path(plan.env["RINGFLOW_PROGRESS_FILE"]).parent
        *refused, progress, prediction = attempt(
            plan,
            [
                ("write", str(inside / "new.txt")),
                ("append", str(inside / "run.py")),
                ("append", str(inside / "open.txt")),
                ("write", "$RINGFLOW_PROGRESS_FILE"),
                ("write", "$RINGFLOW_OUTPUT_DIR/pred.csv"),
            ],
        )
    finally:
        plan.finish()
    for outcome in refused:
        assert not outcome["ok"] and outcome["error"] in ("PermissionError", "OSError"), outcome
    assert (ring.solution / "open.txt").read_text() == "open\n"
    assert progress["ok"] and prediction["ok"], (progress, prediction)
    assert (ring.solution / "run.py").read_text() == run_py
    assert (ring.solution / "progress.json").read_text() == "written by the program\n"
    assert (ring.output / "pred.csv").read_text() == "written by the program\n"


@pytest.mark.parametrize("training", [True, False], ids=["training", "replay"])
def test_weights_folder_is_writable_only_when_training(ring, info, training):
    partial = ring.weights / "partial.ckpt"
    partial.write_text("half-trained\n")
    writable = (ring.weights,) if training else ()
    plan = start(ring, info, ring.request(writable_dirs=writable), weights_dir_rel="weights")
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
        assert written.stat().st_uid == os.getuid()
    else:
        for outcome in (write, remove):
            assert not outcome["ok"], outcome
        assert not written.exists() and partial.read_text() == "half-trained\n"


@pytest.mark.skipif(not ROOT, reason="ownership is lent only when the program runs as another uid")
def test_output_comes_back_owned_by_its_owner_as_root(ring, info):
    os.chown(ring.output, RING_OWNER, RING_OWNER)
    plan = start(ring, info)
    try:
        outcomes = attempt(plan, [("write", "$RINGFLOW_OUTPUT_DIR/sub/deep.txt")])
        assert all(o["ok"] for o in outcomes), outcomes
    finally:
        plan.finish()
    for path in (ring.output, ring.output / "sub", ring.output / "sub" / "deep.txt"):
        st = path.lstat()
        assert (st.st_uid, st.st_gid) == (RING_OWNER, RING_OWNER), path


def test_tmp_is_fresh_and_size_limited(ring, info):
    plan = start(ring, info, ring.request(tmp_mb=16))
    try:
        small, big = attempt(plan, [("fill", "/tmp/a:4"), ("fill", "/tmp/b:32")])
    finally:
        plan.finish()
    assert small["ok"], small
    assert not big["ok"] and big["error"] == "OSError", big


def test_process_limit_holds_inside_the_user_namespace(ring, info):
    # As root too: each run has a user namespace and a host uid of its own.
    plan = start(ring, info, ring.request(max_processes=8))
    try:
        few, many = attempt(plan, [("fork", "2"), ("fork", "40")])
    finally:
        plan.finish()
    assert few == {"ok": True, "value": 2}
    assert not many["ok"], many


# --- network ----------------------------------------------------------------------------


@pytest.mark.parametrize("network", [False, True], ids=["default", "network-true"])
def test_no_network_unless_asked_for(ring, info, listener, network):
    plan = start(ring, info, ring.request(network=network))
    try:
        (outcome,) = attempt(plan, [("connect", listener)])
    finally:
        plan.finish()
    assert plan.network_isolated is not network
    assert outcome["ok"] is network, outcome


# --- refusals and failures ----------------------------------------------------------------


@pytest.mark.skipif(not ROOT, reason="lending files to another uid happens as root only")
def test_hardlinked_weights_are_refused_before_anything_changes(ring, info):
    stored = ring.store / "objects" / "obj1"
    os.link(stored, ring.weights / "model.bin")
    with pytest.raises(SandboxError, match="hard links"):
        start(ring, info, ring.request(writable_dirs=(ring.weights,)))
    assert stored.stat().st_uid == 0, "the store object was not lent to the sandbox user"
    assert not (ring.solution / "progress.json").exists()


def test_symlinked_progress_file_is_refused(ring, info, tmp_path):
    (tmp_path / "elsewhere").write_text("{}")
    (ring.solution / "progress.json").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(SandboxError, match="regular file"):
        start(ring, info)


def test_a_set_up_failure_is_reported_as_the_sandbox_s(ring, info):
    """bubblewrap that cannot set up (a bind source vanished) never reports a started child."""
    plan = start(ring, info, ring.request(mounts=(ring.root.parent / "missing",)))
    fds = () if plan.status_fd is None else (plan.status_fd,)
    plan.spawn_setup()
    subprocess.run(plan.argv, env=plan.env, cwd=plan.cwd, capture_output=True, timeout=60,
                   check=False, pass_fds=fds)  # fmt: skip
    with pytest.raises(SandboxError, match="did not start the program"):
        plan.confirm_started()
    plan.finish()


def test_no_sandbox_refuses_with_what_to_do(broken_bwrap):
    with pytest.raises(SandboxError) as refused:
        require_sandbox(sandbox_settings(mode="auto", uid=4242, gid=4242))
    message = str(refused.value)
    assert "No permissions to create new namespace" in message
    assert "sandbox.mode: none" in message
    if not ROOT:
        assert "sysctl" in message or "namespaces" in message


def test_missing_bubblewrap_names_the_package(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SandboxError, match="apt-get install bubblewrap"):
        require_sandbox(sandbox_settings(mode="bwrap", uid=4343, gid=4343))


def test_mode_none_must_be_named_and_runs_unconfined(ring):
    info = require_sandbox(sandbox_settings(mode="none", uid=NOBODY, gid=NOBODY))
    plan = start(ring, info)
    assert plan.mode == "none" and plan.argv[1] == "run.py"
    assert any("unconfined" in note for note in plan.notes)


def test_unknown_sandbox_mode_is_refused():
    with pytest.raises(SandboxError, match="'docker' is not one of"):
        require_sandbox(sandbox_settings(mode="docker", uid=NOBODY, gid=NOBODY))
