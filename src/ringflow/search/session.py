"""One engineer session: make the node's workspace, run the engineer in the sandbox under
the supervisor until it exits or the hand-over point, then settle the node
(docs/contracts.md#engineer).

The session sees its workspace (read-write, `/ringflow/workspace`), its instructions
(`/ringflow/INSTRUCTIONS.md`), its parent's submission (`/ringflow/parent`, read-only),
the public inputs of every search view (`/ringflow/inputs/<view>`), the candidates'
environment and `engineer.mounts`; never labels, the task folder, the ring folder or the
store. Its stdout and stderr are its raw log in `nodes/<id>/trajectory/`.

Afterwards: a runnable workspace becomes the node's submission and is executed like any
node (also when the session was cut at the hand-over point: its snapshot is then sealed as
evidence when the search ends, carryover/evidence.py); a session cut without a
runnable program is `carried_over` (kind `engineer`, its workspace kept for the seal); any
other session without one is `rejected` with the reason.

A resume node's session (carryover/engineer.py) starts from the sealed work's `solution/`,
sees that snapshot read-only (`/ringflow/resume`), has the quota its earlier segments left,
and its trajectory starts with their logs.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import stat
import time
from pathlib import Path

from .. import sandbox
from ..candidate import (
    check_tree,
    copy_submission,
    runnable_problem,
    workspace_limits,
)
from ..carryover import engineer as carried
from ..cluster.jobs import record_job
from ..core import statuses
from ..core.clock import handover_at, load_node, load_ring
from ..core.errors import CandidateError, RingflowError, SandboxError
from ..core.hashing import solution_tree_hash
from ..core.jsonio import atomic_write_json, read_json
from ..core.layout import RingLayout
from ..core.ledger import Ledger, emit_event
from ..core.node_state import Node, write_node
from ..core.safetext import last_log_lines, printable
from ..core.state import Ring
from ..core.stop import refuse_if_stopped, stop_ring
from ..nodes import READY, REJECTED, _assign_trainers, execution_spec, planned_variants
from ..ring.boxes import close_box, open_box
from ..sandbox.box import confined_plan, sandbox_head, sandbox_tail
from ..sandbox.commands import INSIDE
from ..sandbox.identity import RunIdentity, claim_identity
from ..sandbox.model import SandboxPlan
from ..sandbox.ownership import OwnershipLoan
from ..supervisor import HealthSettings, ResourceLimits, supervise
from ..supervisor.memory import private_tmp_mb
from ..weights.store import WeightsStore
from ..workcopy import make_readonly_tree
from . import best_so_far, instructions, public_validator
from .index import add_keys, set_entry, update_index
from .plan import ENGINEERING
from .queries import QueryServer

STDERR_TAIL = 64 * 1024  # of a session's stderr, read for its last line
STDERR_LINE_CHARS = 200
# How a session that did not end by itself ended, in words (its status: session_run).
ENDED = {statuses.CRASH: "crashed", statuses.TIMEOUT: "timed out", "stalled": "stalled",
         statuses.INTERRUPTED: "was interrupted"}  # fmt: skip


class SessionStopped(RingflowError):
    """A session stopped with its ring: its node stays unsettled, to be engineered again."""


CARRIED_OVER = "carried_over"
SESSION_MARK = "SESSION.json"  # in the session's box, never shown to the engineer
BUILTIN_SCRIPT = Path(__file__).with_name("builtin_engineer.py")

WORKSPACE = INSIDE / "workspace"
PARENT = INSIDE / "parent"
INPUTS = INSIDE / "inputs"
INSTRUCTIONS = INSIDE / "INSTRUCTIONS.md"
ENGINE = INSIDE / "engineer"
SOCKET = INSIDE / "score.sock"
LIBRARY = INSIDE / "library"
RESUME = INSIDE / "resume"
VALIDATOR = INSIDE / "validator"


def run_session(ring_dir: str | Path, node_id: str) -> dict:
    """Run the node's engineer session once and settle the node; returns session.json."""
    refuse_if_stopped(ring_dir)
    ring = load_ring(ring_dir)
    layout = RingLayout(Path(ring.ring_dir))
    node = load_node(ring, node_id)
    if node.status != ENGINEERING and layout.session(node_id).exists():
        return read_json(layout.session(node_id))
    record_job(layout.root, node.id, None, None, rule="engineer")  # under SLURM only
    box, held = open_box(layout.root)
    try:
        # Which node the box is for: where SLURM ends the session's job, the driver settles
        # the node from this workspace (settle_killed_session).
        atomic_write_json(box / SESSION_MARK, {"ring": str(layout.root), "node": node.id,
                                               "started_at": time.time()})  # fmt: skip
        return _run_in_box(ring, layout, node, box)
    finally:
        close_box(box, held)


def settle_killed_session(ring_dir: str | Path, node_id: str, job: str, end) -> dict:
    """Settle the node of a session whose SLURM job SLURM ended (its time or memory limit,
    scancel, a failed node, preemption; `end` is cluster.jobs.JobEnd), as the session would
    have after its engineer crashed: its workspace's runnable program is submitted, else
    the node is rejected with SLURM's reason. Run by the driver, which hears of the end
    (ringflow.workflow.cluster). A session that settled its node itself stands."""
    from ..cluster.jobs import kill_reason, kill_status, parse_state
    from ..ring.boxes import remove_abandoned_boxes

    ring = load_ring(ring_dir)
    layout = RingLayout(Path(ring.ring_dir))
    node = load_node(ring, node_id)
    if node.status != ENGINEERING and layout.session(node_id).exists():
        return read_json(layout.session(node_id))
    box = _session_box(layout, node_id)
    empty, held = (None, None) if box is not None else open_box(layout.root)
    try:
        workspace = (box or empty) / "workspace"
        workspace.mkdir(exist_ok=True)
        mark = read_json(box / SESSION_MARK) if box is not None else {}
        now = time.time()
        record = {
            "node": node.id, "operator": node.operator,
            "started_at": mark.get("started_at", now), "deadline": handover_at(ring),
            "network": ring.config.engineer.network, "status": str(kill_status(end.state)),
            "budget_cut": False, "exit_code": None,
            "reason": kill_reason(job, end, rule="engineer"),
            "slurm_job_id": job, "slurm_state": parse_state(end.state), "ended_at": now,
        }  # fmt: skip
        record = _settle(ring, layout, node, workspace, record)
    finally:
        close_box(empty, held)
    remove_abandoned_boxes(layout.root)  # the killed job's box, its workspace settled
    return record


def _session_box(layout: RingLayout, node_id: str) -> Path | None:
    """The box of the node's last session, where it is still there (the boxes folder is
    shared by the rings of one runs folder)."""
    found = []
    for mark in layout.boxes.glob(f"*/{SESSION_MARK}"):
        try:
            record = read_json(mark)
        except (OSError, ValueError):
            continue
        ours = isinstance(record, dict) and record.get("ring") == str(layout.root)
        if ours and record.get("node") == node_id:
            found.append((float(record.get("started_at") or 0), mark.parent))
    return max(found)[1] if found else None


def _run_in_box(ring: Ring, layout: RingLayout, node: Node, box: Path) -> dict:
    engineer = ring.config.engineer
    workspace = box / "workspace"
    _make_workspace(ring, layout, node, workspace)
    trajectory = layout.trajectory(node.id)
    shutil.rmtree(trajectory, ignore_errors=True)
    trajectory.mkdir(parents=True)
    if carried.is_resume(node):
        carried.copy_earlier_logs(layout, node, trajectory)
    deadline_at = handover_at(ring)
    text = instructions.render(instructions.context(ring, layout, node, deadline_at))
    (box / "INSTRUCTIONS.md").write_text(text)
    (trajectory / "INSTRUCTIONS.md").write_text(text)
    started = time.time()
    record = {"node": node.id, "operator": node.operator, "started_at": started,
              "deadline": deadline_at, "network": engineer.network}  # fmt: skip
    if started >= deadline_at:
        record.update(status="not_started", budget_cut=True, exit_code=None,
                      reason="not started: the hand-over point had passed")  # fmt: skip
    else:
        record.update(_run_engineer(ring, layout, node, box, trajectory))
    _redact(trajectory, engineer.env_pass)
    if record["status"] == statuses.INTERRUPTED and not record.get("budget_cut"):
        # Stopped with its ring (a Ctrl-C, the driver's relay, the driver's loss), not by
        # the ring's clock: the node is not settled, and its session runs again, from the
        # start, when the ring does, as an interrupted execution does (docs/recovery.md).
        raise SessionStopped(
            f"the engineer session of {node.id} was stopped with its ring "
            f"({record.get('reason')}): it runs again, from the start, when the ring does"
        )
    if carried.is_resume(node):
        carried.write_transcript(ring, node, trajectory)
    record["ended_at"] = time.time()
    return _settle(ring, layout, node, workspace, record)


def _make_workspace(ring: Ring, layout: RingLayout, node: Node, workspace: Path) -> None:
    """An improvement starts from its parent's submission, a draft from the template, a
    resume node from the carried work's solution/ (absent when that workspace was empty)."""
    source = carried.session_start(ring, layout, node)
    if source is not None and not source.is_dir():
        if not carried.is_resume(node):
            raise CandidateError(f"engineer.template {source} is not a folder")
        source = None
    if source is None:
        workspace.mkdir()
    else:
        shutil.copytree(source, workspace, symlinks=True)
    for dirpath, _dirs, files in os.walk(workspace):
        os.chmod(dirpath, 0o755)
        for name in files:
            path = Path(dirpath) / name
            if not path.is_symlink():
                os.chmod(path, stat.S_IMODE(path.stat().st_mode) | 0o644)


def _command_argv(ring: Ring) -> tuple[list[str], list[Path]]:
    """The session's argv and the extra host folders it needs bound."""
    command = ring.config.engineer.command.strip()
    if command == "builtin":
        python = ring.program.python
        return [python, str(ENGINE / BUILTIN_SCRIPT.name)], []
    return ["/bin/sh", "-c", command], []


def _session_env(ring: Ring, node: Node, paths: dict, deadline: float) -> dict[str, str]:
    engineer = ring.config.engineer
    python = ring.program.python
    env = {
        "PATH": f"{Path(python).parent}:/usr/local/bin:/usr/bin:/bin",
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "HOME": paths["home"],
        "TMPDIR": paths["home"],
        "PYTHONDONTWRITEBYTECODE": "1",
        "RINGFLOW_NODE": node.id,
        "RINGFLOW_ORIGIN": node.origin["kind"],
        "RINGFLOW_WORKSPACE": paths["workspace"],
        "RINGFLOW_INSTRUCTIONS": paths["instructions"],
        "RINGFLOW_INPUTS": paths["inputs"],
        "RINGFLOW_DEADLINE": f"{deadline:.0f}",
        "RINGFLOW_PYTHON": python,
        "RINGFLOW_FEEDBACK": ring.config.search.feedback,
        "RINGFLOW_ENGINEER_DELAY_S": str(engineer.builtin_delay_s),
        "RINGFLOW_ENGINEER_SEED": node.id,
        "RINGFLOW_QUERY_CLIENT": paths["query_client"],
    }
    if paths.get("socket"):
        env["RINGFLOW_QUERY_SOCKET"] = paths["socket"]
        env["RINGFLOW_QUERY_TOKEN"] = paths["token"]
    if paths.get("validate"):
        env["RINGFLOW_VALIDATE"] = paths["validate"]
    if paths.get("parent"):
        env["RINGFLOW_PARENT_DIR"] = paths["parent"]
    if paths.get("resume"):
        env["RINGFLOW_RESUME_DIR"] = paths["resume"]
    if paths.get("library"):
        env["RINGFLOW_ENGINEER_LIBRARY"] = paths["library"]
    for name in engineer.env_pass:
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def _validator_copy(ring: Ring, box: Path, confined: bool) -> str | None:
    """The task's public validator for the session (item 5): its `validate` command as the
    session sees it, or None when the task ships none or it cannot be handed out."""
    if public_validator.refusal(ring.task) is not None:
        return None
    folder = box / "validator"
    engine = ENGINE if confined else BUILTIN_SCRIPT.parent
    inside = VALIDATOR if confined else folder
    validate = public_validator.make_copy(
        ring.task, folder, python=ring.program.python,
        runner=str(engine / public_validator.RUNNER.name), inside=str(inside),
    )  # fmt: skip
    return str(inside / validate.name)


def draft_library(ring: Ring) -> Path | None:
    """Where the built-in engineer's drafts start from: the ring's own candidates folder
    (the demo's candidates for the demo task). None when the ring has none, and for any
    other engineer: the folder may hold more than candidates (a task, its labels)."""
    if ring.config.engineer.command.strip() != "builtin":
        return None
    folder = ring.candidates_dir
    return Path(folder) if folder and Path(folder).is_dir() else None


def _sandbox_plan(ring, layout, node, box: Path, argv: list[str], deadline: float, server,
                  identity: RunIdentity):  # fmt: skip
    """bubblewrap around the session (or nothing with sandbox.mode none), as `identity`."""
    sock = server and server.path
    config = ring.config
    engineer, box_config = config.engineer, config.sandbox
    workspace = box / "workspace"
    parent = carried.parent_submission(layout, node)
    snapshot = carried.resume_snapshot(layout, node)
    views = {view: ring.views[view].snapshot for view in ring.search_views}
    library = draft_library(ring)
    if not ring.sandbox.confined:
        inputs = box / "inputs"
        inputs.mkdir()
        for view, folder in views.items():
            (inputs / view).symlink_to(folder)
        paths = {"workspace": str(workspace), "instructions": str(box / "INSTRUCTIONS.md"),
                 "inputs": str(inputs), "parent": parent and str(parent), "home": str(box),
                 "resume": snapshot and str(snapshot),
                 "library": library and str(library), "socket": sock and str(sock),
                 "token": server and server.token,
                 "query_client": str(BUILTIN_SCRIPT.with_name("query_client.py")),
                 "validate": _validator_copy(ring, box, confined=False)}  # fmt: skip
        if argv[1:2] == [str(ENGINE / BUILTIN_SCRIPT.name)]:
            argv = [argv[0], str(BUILTIN_SCRIPT)]
        env = _session_env(ring, node, paths, deadline)
        return SandboxPlan(mode="none", argv=argv, env=env, cwd=str(workspace),
                           network_isolated=False)  # fmt: skip
    info = sandbox.require_sandbox(box_config)
    root = info["mode"] == "root"
    hidden = (layout.root.parent, Path(ring.task.dir), Path(ring.store))
    bound = [*ring.program.bound_dirs, *(Path(m) for m in engineer.mounts)]
    tmp = private_tmp_mb(config.sandbox, config.limits.to_mapping())
    args = sandbox_head(info, network=engineer.network, tmp_mb=tmp, bound=bound,
                        hidden=hidden, identity=identity)  # fmt: skip
    args += ["--bind", str(workspace), str(WORKSPACE)]
    args += ["--ro-bind", str(box / "INSTRUCTIONS.md"), str(INSTRUCTIONS)]
    if parent is not None:
        args += ["--ro-bind", str(parent), str(PARENT)]
    # The folder that holds the views is made by us, readable: one bwrap makes for a bind's
    # destination is 0700, root's, and the sandbox uid could not enter it.
    args += ["--perms", "0755", "--dir", str(INPUTS)]
    for view, folder in views.items():
        args += ["--ro-bind", str(folder), str(INPUTS / view)]
    args += ["--ro-bind", str(BUILTIN_SCRIPT.parent), str(ENGINE)]
    if library is not None:
        args += ["--ro-bind", str(library), str(LIBRARY)]
    if snapshot is not None:
        args += ["--ro-bind", str(snapshot), str(RESUME)]
    if sock is not None:
        args += ["--bind", str(sock), str(SOCKET)]
    validate = _validator_copy(ring, box, confined=True)
    if validate is not None:
        args += ["--ro-bind", str(box / "validator"), str(VALIDATOR)]
    tail, read_status, write_status = sandbox_tail(
        info, WORKSPACE, uid=box_config.uid, gid=box_config.gid,
        max_processes=config.limits.max_processes,
        max_file_bytes=workspace_limits(ring).max_file_bytes,
    )  # fmt: skip
    args += tail
    cleanups = []
    if root:
        loan = OwnershipLoan(identity.host_uid, identity.host_gid)
        loan.lend(workspace)
        cleanups.append(loan.take_back)
    paths = {"workspace": str(WORKSPACE), "instructions": str(INSTRUCTIONS),
             "inputs": str(INPUTS), "parent": parent and str(PARENT), "home": "/tmp",
             "resume": snapshot and str(RESUME),
             "library": library and str(LIBRARY), "socket": sock and str(SOCKET),
             "token": server and server.token,
             "query_client": str(ENGINE / "query_client.py"), "validate": validate}  # fmt: skip
    return confined_plan(info, args + argv, _session_env(ring, node, paths, deadline), identity,
                         network_isolated=not engineer.network,
                         status=(read_status, write_status), cleanups=cleanups)  # fmt: skip


def _run_engineer(ring, layout, node, box: Path, trajectory: Path) -> dict:
    config = ring.config
    argv, _ = _command_argv(ring)
    deadline = handover_at(ring)
    # The session's own ids (as root: a host uid and user namespace of its own).
    box_config = config.sandbox
    info = {"mode": "none"} if not ring.sandbox.confined else sandbox.require_sandbox(
        box_config)  # fmt: skip
    identity = claim_identity(info, box_config.uid, box_config.gid,
                              box_config.host_uids)  # fmt: skip
    # Native feedback: the session is handed a socket to the scorer side, nothing else;
    # the socket is its uid's alone, and its token is handed to it alone.
    server = None
    try:
        if config.search.feedback == "native":
            server = QueryServer(ring, layout, node.id, box / "queries",
                                 quota=carried.queries_left(ring, node),
                                 peer=(identity.host_uid, identity.host_gid))  # fmt: skip
        plan = _sandbox_plan(ring, layout, node, box, argv, deadline, server, identity)
    except BaseException:
        if server is not None:
            server.close()
        identity.close()
        raise
    # A session with no activity of its own for engineer.stall_min is stopped (`stalled`).
    health = dataclasses.replace(
        config.exec_health, enforce=True, hang_min=config.engineer.stall_min
    )
    # Best so far (item 7): the workspace's runnable program, scored for the report only.
    background = best_so_far.BackgroundEvaluator(
        ring, layout, node, box / "workspace", lambda: handover_at(ring)
    ).start()
    try:
        outcome = supervise(
            plan.argv,
            cwd=plan.cwd,
            env=plan.env,
            stdout_path=trajectory / "stdout.log",
            stderr_path=trajectory / "stderr.log",
            health_dir=trajectory / "health",
            settings=HealthSettings.from_config(health),
            limits=_session_limits(ring),
            deadline=lambda: handover_at(ring),
            watch_writable=[box / "workspace"],
            wrappers=plan.wrappers,
            pass_fds=plan.pass_fds,
            spawn_setup=plan.spawn_setup,
            mark_environment=plan.mode == "none",
        )
        if outcome.start_failed:
            raise SandboxError(outcome.reason)
        if plan.status_fd is not None and (outcome.exit_code is not None or outcome.signal):
            plan.confirm_started()
    except SandboxError as exc:
        raise stop_ring(layout.root, f"the sandbox could not run the engineer session of "
                        f"{node.id}: {exc}", node=node.id) from None  # fmt: skip
    finally:
        background.stop()  # cut at the session's end: it never delays the hand-over
        plan.finish()
        # The client is closed first, then its count settled from the scorer's record.
        queries_used = server.close() if server is not None else 0
        identity.close()
    status = {statuses.OK: "ended", statuses.HUNG: "stalled"}.get(outcome.status, outcome.status)
    if outcome.budget_cut:
        status = "cut"
    return {
        "status": status,
        "budget_cut": outcome.budget_cut,
        "exit_code": outcome.exit_code,
        "signal": outcome.signal,
        "wall_s": outcome.wall_s,
        "cpu_s": outcome.cpu_s,
        "reap_left": outcome.reap_left,
        "reason": outcome.reason,
        "sandbox": {
            "mode": plan.mode,
            "network_isolated": plan.network_isolated,
            **identity.record(),
        },
        "queries_used": queries_used,
        "queries_quota": server.quota if server is not None else None,
    }


def _session_limits(ring: Ring) -> ResourceLimits:
    """The program limits with the workspace in place of the output: the supervisor counts
    the workspace's files and bytes as it counts a program's output."""
    config, workspace = ring.config, workspace_limits(ring)
    gb = None if workspace.max_bytes is None else workspace.max_bytes / 1024**3
    limits = ResourceLimits.from_mapping(
        {**config.limits.to_mapping(), "output_gb": gb, "output_files": workspace.max_files}
    )
    names = ("engineer.limits.workspace_gb", "engineer.limits.workspace_files")
    largest = f"engineer.limits.file_mb = {config.engineer.limits.file_mb:g}"
    return dataclasses.replace(limits, output_names=names, largest_file=largest)


def _redact(trajectory: Path, names: list[str]) -> None:
    """Values of passed variables (API keys) never stay in the raw log (any file of it)."""
    carried.redact_tree(trajectory, names)


def _unboxed(problem: str, workspace: Path) -> str:
    """A problem without the session's sandbox folder, which is gone when it is read."""
    return problem.replace(f"{workspace}: ", "").replace(f"{workspace}/", "")


def _session_said(layout: RingLayout, node_id: str, record: dict) -> str:
    """ "the engineer session " and, where it did not end well, how it ended and the last
    line of its stderr: what a user needs to fix an engineer that fails."""
    said = "the engineer session "
    if record.get("status") in (None, "ended", "cut"):
        return said
    ended = ENDED.get(record["status"], f"ended {record['status']}")
    said += f"{ended} ({record.get('reason') or 'no reason recorded'}"
    try:
        with open(layout.trajectory(node_id) / "stderr.log", "rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - STDERR_TAIL))
            last = last_log_lines(handle.read(), 1)
    except OSError:
        last = []
    if last:
        said += f"; its stderr ends: {printable(last[0])[:STDERR_LINE_CHARS]}"
    return said + ") and "


def _same_program(layout: RingLayout, node: dict, tree: str) -> str | None:
    """Where the session's program is one that runs already (its parent's, unchanged, or
    another node's): the words that say so, else None."""
    index = read_json(layout.nodes_index) if layout.nodes_index.exists() else {"nodes": []}
    ready = [e["id"] for e in index["nodes"] if e["id"] != node["id"] and e["status"] == READY]
    parent = node.get("parent")
    for other in sorted(ready, key=lambda n: n != parent):  # the parent first
        path = layout.node_json(other)
        if path.exists() and read_json(path).get("tree_hash") == tree:
            if other == parent:
                return f"changed nothing: its program is its parent {other}'s"
            return f"wrote the program of {other}, which runs already"
    return None


def _settle(ring, layout, node: Node, workspace: Path, record: dict) -> dict:
    """Submit a runnable workspace, carry over a cut one without, reject the rest."""
    max_bytes = int(ring.config.max_weights_gb * 1024**3)
    try:
        # A workspace no one can copy or record is refused whole, cut or not: it is
        # neither submitted nor kept for a seal (docs/limits.md).
        check_tree(workspace, workspace_limits(ring))
        refused = None
    except CandidateError as exc:
        refused = str(exc).replace(f"{workspace}: ", "")
    solution, problem = (None, refused) if refused else runnable_problem(
        workspace, max_bytes, workspace_limits(ring))  # fmt: skip
    record["runnable"] = solution is not None
    # The settled node.json, made from the node's record and written once, typed, below.
    node = node.to_record()
    node["timestamps"] = {**node.get("timestamps", {}), "session_started_at":
                          record["started_at"], "session_ended_at": record["ended_at"]}  # fmt: skip
    node["queries_used"] = record.get("queries_used", 0)
    node["session"] = {k: record.get(k) for k in ("status", "budget_cut", "exit_code",
                                                  "reason", "runnable", "network")}  # fmt: skip
    owners: dict = {}
    copy_of = None
    if solution is not None:
        submission = layout.submission(node["id"])
        shutil.rmtree(submission, ignore_errors=True)
        copy_submission(solution, submission)
        make_readonly_tree(submission)
        tree, _ = solution_tree_hash(submission, set(solution.per_view_paths),
                                     ring.tree_ignore or [])  # fmt: skip
        # A session cut at the hand-over point keeps what it holds, its parent's copy
        # included: that copy is run and sealed as evidence (docs/contracts.md#engineer).
        copy_of = None if record.get("budget_cut") else _same_program(layout, node, tree)
    if solution is not None and copy_of is None:
        node.update(status=READY, tree_hash=tree, solution=solution.to_dict())
        node["executions"] = {
            view: {v: execution_spec(ring, solution, tree, view, v) for v in variants}
            for view, variants in planned_variants(ring).items()
        }
        owners = _assign_trainers([node], WeightsStore(ring.store))
    elif solution is not None:
        # Run again, it would only repeat what ran: the session found nothing new.
        shutil.rmtree(layout.submission(node["id"]), ignore_errors=True)
        node.update(status=REJECTED, tree_hash=tree,
                    error=_session_said(layout, node["id"], record) + copy_of)  # fmt: skip
    elif record.get("budget_cut") and refused is None:
        carried.keep_workspace(layout, node["id"], workspace)  # the seal takes it
        reason = _unboxed(problem, workspace)  # the sandbox folder is gone
        node.update(status=CARRIED_OVER, carryover={"kind": carried.KIND, "reason": reason})
    else:
        what = "a workspace that cannot be submitted" if refused else "no runnable program"
        error = (f"{_session_said(layout, node['id'], record)}left {what}: "
                 f"{_unboxed(problem, workspace)}")  # fmt: skip
        if record.get("slurm_state"):  # the driver settles a session SLURM ended
            error = f"{record['reason']}; {error}"
        node.update(status=REJECTED, error=error)
    node["timestamps"]["settled_at"] = time.time()
    write_node(layout.root, layout.node_json(node["id"]), Node.from_record(node))

    def settle(index: dict) -> None:
        set_entry(index, {"id": node["id"], "name": node["name"], "role": node["role"],
                          "status": node["status"]})  # fmt: skip
        add_keys(index, owners)

    update_index(layout, settle)
    ledger = Ledger(layout.ledger)
    ledger.append("node_engineered", node=node["id"], status=node["status"],
                  session=record["status"], tree_hash=node.get("tree_hash"))  # fmt: skip
    if node["status"] != READY:
        emit_event(layout.root, f"node_{node['status']}", node=node["id"],
                   reason=node.get("error") or problem)  # fmt: skip
    record["node_status"] = node["status"]
    atomic_write_json(layout.session(node["id"]), record)
    return record
