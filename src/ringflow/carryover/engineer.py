"""Carryover of the `engineer` kind (docs/operations.md#carryover): an engineer session cut at the
hand-over point without a runnable program.

Sealing. The session has ended before its node is settled `carried_over`: the supervisor
reaped its process tree, its query client was closed and its count settled from the
scorer's record, and its workspace was kept as the session left it
(`nodes/<id>/workspace/`). The seal takes that workspace (`solution/`), the engineer's
`PLAN.json` if it wrote one, the raw log (`trajectory/`, the values of `engineer.env_pass`
redacted) and HANDOFF.json. A session that left processes behind is never sealed.

Resuming. The work becomes a resume node of the next ring, in its generation 0 (served
before any new node): a new session whose workspace is the snapshot's `solution/`, with a
resume block in its instructions and the snapshot read-only at `/ringflow/resume`. Its
query quota is `queries_per_node` minus what every earlier segment settled (unknown in any
segment: 0). Its trajectory starts with the earlier segments' logs, one folder per segment
(`trajectory/segments/<k>-<ring>--<node>/`, oldest first) and `trajectory/transcript.log`,
every segment's log in order, each under its own marker, this session's last.

A resume node's `parent` is the carried work's real parent, a node of the ring where the
work began (the first segment's ring).
"""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import time
from pathlib import Path

from ..core import statuses
from ..core.jsonio import atomic_write_bytes, atomic_write_json, read_json
from ..core.layout import RingLayout
from ..core.node_state import Node
from ..core.query_record import settled_count
from ..core.safetext import last_log_lines, printable
from ..core.safetree import read_head
from ..core.state import Ring
from ..core.statuses import ENGINEERING
from .seal import SealRequest
from .snapshot import file_sha256, walk_entries, why_skipped

KIND = "engineer"
WORKSPACE_DIR = "workspace"
PLAN_FILE = "PLAN.json"
SEGMENTS_DIR = "segments"
SEGMENT_FILE = "SEGMENT.json"
TRANSCRIPT = "transcript.log"
LAST_MESSAGES = 30
MESSAGE_CHARS = 500  # per quoted line of the log
LOG_TAIL_BYTES = 64 * 1024
NO_CHANGES = {"added": [], "modified": [], "removed": []}
METHOD_CHARS = 2000
SESSION_STATS = ("status", "started_at", "ended_at", "wall_s", "cpu_s", "exit_code", "signal",
                 "budget_cut", "network")  # fmt: skip


def is_resume(node: Node) -> bool:
    """A resume node (carryover/resume.py), without importing the import."""
    return (node.origin or {}).get("kind") == "resume"


def cut_workspace(layout: RingLayout, node_id: str) -> Path:
    """Where a carried session's workspace is kept, as the session left it, until sealed."""
    return layout.node_dir(node_id) / WORKSPACE_DIR


def keep_workspace(layout: RingLayout, node_id: str, workspace: Path) -> Path:
    """Move a cut session's workspace out of its sandbox folder (which is removed)."""
    dest = cut_workspace(layout, node_id)
    if dest.exists():
        shutil.rmtree(dest)
    os.rename(workspace, dest)
    return dest


def is_carried_engineer(node: Node) -> bool:
    return node.status == statuses.CARRIED_OVER and (node.carryover or {}).get("kind") == KIND


# ---- redaction and logs -----------------------------------------------------------------


def redact_tree(folder: Path, names: list[str]) -> list[str]:
    """Replace the values of the named environment variables (API keys) in every regular
    file under `folder` by `[NAME redacted]`; the files changed."""
    values = {name: os.environ[name] for name in names if os.environ.get(name)}
    changed = []
    if not values or not folder.is_dir():
        return changed
    for rel, info in walk_entries(folder):
        if why_skipped(info, float("inf")) is not None:
            continue
        path = folder / rel
        data = path.read_bytes()
        redacted = data
        for name, value in values.items():
            redacted = redacted.replace(value.encode(), f"[{name} redacted]".encode())
        if redacted != data:
            atomic_write_bytes(path, redacted)
            changed.append(rel)
    return changed


def last_lines(path: Path, count: int = LAST_MESSAGES) -> list[str]:
    """The last `count` non-empty lines of a session's log, read from its tail only (the
    log may be one line of gigabytes), each escaped and cut to MESSAGE_CHARS: the next
    session's instructions and HANDOFF.json quote them (docs/limits.md#text-shown-to-the-user)."""
    data = _read_tail(path, LOG_TAIL_BYTES)
    if data is None:
        return []
    return [printable(line)[:MESSAGE_CHARS] for line in last_log_lines(data, count)]


def _read_tail(path: Path, max_bytes: int) -> bytes | None:
    """The last max_bytes of a regular file, or None when it is missing or not a regular
    file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        return os.pread(fd, max_bytes, max(info.st_size - max_bytes, 0))
    except OSError:
        return None
    finally:
        os.close(fd)


def changed_files(start: Path | None, workspace: Path) -> dict:
    """Regular files added, modified and removed in `workspace` since it was `start`."""

    def hashes(root: Path | None) -> dict[str, str]:
        if root is None or not root.is_dir():
            return {}
        out = {}
        for rel, info in walk_entries(root):
            if why_skipped(info, float("inf")) is None:
                out[rel] = file_sha256(root / rel)[0]
        return out

    before, after = hashes(start), hashes(workspace)
    return {
        "added": sorted(set(after) - set(before)),
        "modified": sorted(p for p in set(after) & set(before) if after[p] != before[p]),
        "removed": sorted(set(before) - set(after)),
    }


# ---- where a session starts ---------------------------------------------------------------


def parent_layout(layout: RingLayout, node: Node) -> RingLayout:
    """The ring that holds a node's parent: its own, or for a resume node the ring where
    the carried work began."""
    if is_resume(node):
        segments = _segments(node)
        if segments and segments[0].get("ring_dir"):
            return RingLayout(Path(segments[0]["ring_dir"]))
    return layout


def parent_ring_dir(sealing_ring: Path, handoff: dict) -> Path:
    """The ring that holds the parent a HANDOFF.json names: the ring where the work began
    (its first segment's), or the sealing ring for work sealed once."""
    segments = handoff.get("segments") or []
    if segments and segments[0].get("ring_dir"):
        return Path(segments[0]["ring_dir"])
    return Path(sealing_ring)


def parent_submission(layout: RingLayout, node: Node) -> Path | None:
    """The parent's submission (read-only view of the session), None when it has none."""
    if not node.parent:
        return None
    folder = parent_layout(layout, node).submission(node.parent)
    return folder if folder.is_dir() else None


def resume_snapshot(layout: RingLayout, node: Node) -> Path | None:
    """The verified copy of the snapshot a resume node continues (None for other nodes)."""
    if not is_resume(node) or node.resume_origin is None:
        return None
    return layout.root / node.resume_origin["snapshot"]


def session_start(ring: Ring, layout: RingLayout, node: Node) -> Path | None:
    """What a session's workspace is made from: the snapshot's `solution/` (resume), the
    parent's submission (improve) or the template (draft); None for an empty workspace."""
    if is_resume(node):
        return Path(node.origin["path"])
    if node.parent:
        return layout.submission(node.parent)
    template = ring.config.engineer.template
    return Path(template) if template else None


# ---- query quota across segments ----------------------------------------------------------


def _segments(node: Node) -> list[dict]:
    """The earlier segments of a resume node's work, oldest first ([] for other nodes)."""
    return list((node.resume_origin or {}).get("segments") or [])


def earlier_queries(node: Node) -> int | None:
    """Queries every earlier segment of a resume node settled; None when any is unknown."""
    total = 0
    for segment in _segments(node):
        used = (segment.get("quota") or {}).get("used")
        if not isinstance(used, int) or isinstance(used, bool) or used < 0:
            return None
        total += used
    return total


def queries_left(ring: Ring, node: Node) -> int:
    """A node's query quota (docs/contracts.md#engineer): queries_per_node, less every earlier
    segment's."""
    per_node = ring.config.search.queries_per_node
    if not is_resume(node):
        return per_node
    earlier = earlier_queries(node)
    return 0 if earlier is None else max(0, per_node - earlier)


def segment_details(handoff: dict, snapshot: Path) -> dict:
    """A segment's trajectory and quota, as resume_origin.segments[] lists them."""
    trajectory = snapshot / "trajectory"
    used = handoff.get("queries_used")
    return {
        "trajectory": str(trajectory) if trajectory.is_dir() else None,
        "quota": {
            "used": used if handoff.get("queries_settled") else None,
            "quota": handoff.get("queries_quota"),
        },
    }


# ---- the seal -----------------------------------------------------------------------------


def not_sealable(layout: RingLayout, node_id: str) -> str | None:
    """Why a carried session cannot be sealed yet (its writers may not have stopped)."""
    session = layout.session(node_id)
    if not session.is_file():
        return "its session has no record (session.json): the session did not end"
    record = read_json(session)
    if record.get("reap_left"):
        return "processes were left after the stop (reap_left)"
    if record.get("queries_used") is None and record.get("status") != "not_started":
        return "its query count was never settled"
    return None


def engineer_request(ring: Ring, layout: RingLayout, node: Node) -> SealRequest:
    """The hand-over of a cut engineer session (docs/operations.md#carryover): workspace, plan, raw
    log."""
    node_id = node.id
    workspace = cut_workspace(layout, node_id)
    reason = (node.carryover or {}).get("reason") or "no runnable program"
    handoff = {
        "kind": KIND,
        **session_handoff(ring, layout, node, workspace),
        "summary": f"engineer session cut at the hand-over point without a runnable program "
        f"({reason}); the next ring resumes it in a new session from this solution/",
        "why": reason,
        "run_py": (workspace / "run.py").is_file(),
        "runs": False,
    }
    return SealRequest(node_id=node_id, kind=KIND, sources=session_sources(layout, node_id,
                       workspace), handoff=handoff, settle={"reason": reason})  # fmt: skip


def session_sources(layout: RingLayout, node_id: str, solution: Path) -> list[tuple[str, Path]]:
    """What a session's seal takes: its solution, its PLAN.json, its raw log."""
    return [
        ("solution", solution),
        (PLAN_FILE, solution / PLAN_FILE),
        ("trajectory", layout.trajectory(node_id)),
    ]


def session_handoff(ring: Ring, layout: RingLayout, node: Node, solution: Path) -> dict:
    """The hand-over fields of a session cut at the hand-over point (docs/operations.md#carryover),
    with its solution as the session left it; redacts its raw log first (`engineer.env_pass`)."""
    node_id = node.id
    trajectory = layout.trajectory(node_id)
    redact_tree(trajectory, ring.config.engineer.env_pass)
    session = read_json(layout.session(node_id))
    method_text = read_head(solution / "METHOD.md", 4 * METHOD_CHARS)  # any size or kind
    return {
        "ring_id": ring.ring_id,
        "node": node_id,
        "name": node.name,
        "session_reason": session.get("reason"),
        "deadline": session.get("deadline"),
        "cut_at": session.get("ended_at"),
        "changed_files": changed_files(_start_if_present(ring, layout, node), solution),
        "plan": (solution / PLAN_FILE).is_file(),
        "method": None if method_text is None else method_text[:METHOD_CHARS],
        "queries_used": settled_count(layout.node_dir(node_id) / "queries.jsonl"),
        "queries_settled": True,
        "queries_quota": session.get("queries_quota"),
        "session": {k: session.get(k) for k in SESSION_STATS},
        "last_messages": last_lines(trajectory / "stdout.log"),
        "parent": node.parent,
        "origin": dict(node.origin) if node.origin else None,
        "generation": (node.origin or {}).get("generation"),
        "operator": node.operator,
        "segments": _segments(node),
        "sealed_at": time.time(),
    }


def _start_if_present(ring: Ring, layout: RingLayout, node: Node) -> Path | None:
    start = session_start(ring, layout, node)
    return start if start is not None and start.is_dir() else None


def operator(ring: Ring) -> str | None:
    command = ring.config.engineer.command
    if not command:
        return None
    if command.strip() == "builtin":
        return "builtin"
    # The program the command runs, as a shell reads its first word (quotes and all).
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    return words[0] if words else None


# ---- resume nodes -------------------------------------------------------------------------


def resume_stub(ring: Ring, node_id: str, fields: dict) -> dict:
    """A resume node of the engineer kind, planned for a session in generation 0."""
    now = time.time()
    return {
        "id": node_id,
        "role": "candidate",
        "status": ENGINEERING,
        "operator": operator(ring),
        "created_at": now,
        "timestamps": {"planned_at": now},
        "queries_used": None,
        **fields,
    }


def _segment_name(number: int, segment: dict) -> str:
    return f"{number:02d}-{segment['ring']}--{segment['node']}"


def _copy_files(source: Path, dest: Path, skip: tuple[str, ...] = ()) -> None:
    for rel, info in walk_entries(source):
        if rel.split("/")[0] in skip or why_skipped(info, float("inf")) is not None:
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / rel, dest / rel)


def copy_earlier_logs(layout: RingLayout, node: Node, trajectory: Path) -> list[Path]:
    """Every earlier segment's raw log into `trajectory/segments/`, oldest first, each
    marked with SEGMENT.json; the folders written."""
    segments = _segments(node)
    latest = resume_snapshot(layout, node) / "trajectory"
    folders = []
    for number, segment in enumerate(segments, start=1):
        name = _segment_name(number, segment)
        dest = trajectory / SEGMENTS_DIR / name
        dest.mkdir(parents=True)
        if number < len(segments):  # as the latest segment copied it
            source = latest / SEGMENTS_DIR / name
            if source.is_dir():
                _copy_files(source, dest, skip=(SEGMENT_FILE,))
        elif latest.is_dir():  # the latest segment's own log
            _copy_files(latest, dest, skip=(SEGMENTS_DIR, TRANSCRIPT))
        marker = {k: segment.get(k) for k in ("ring", "node", "kind", "seal_sha256",
                                               "sealed_at", "lock_sha256")}  # fmt: skip
        atomic_write_json(dest / SEGMENT_FILE, {"segment": number,
                                                "identity": f"{segment['ring']}#{segment['node']}",
                                                **marker})  # fmt: skip
        folders.append(dest)
    return folders


def _marked(title: str, folder: Path) -> str:
    parts = [f"==== {title} ====\n"]
    for name in ("stdout.log", "stderr.log"):
        path = folder / name
        if path.is_file():
            parts.append(f"---- {name} ----\n")
            text = path.read_text(errors="replace")
            parts.append(text if text.endswith("\n") or not text else text + "\n")
    return "".join(parts)


def write_transcript(ring: Ring, node: Node, trajectory: Path) -> Path:
    """trajectory/transcript.log: every earlier segment's log, oldest first, then this
    session's, each under its marker."""
    segments = _segments(node)
    total = len(segments) + 1
    parts = []
    for number, segment in enumerate(segments, start=1):
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(segment.get("sealed_at") or 0))
        title = (f"segment {number} of {total}: {segment['ring']}#{segment['node']} "
                 f"({segment.get('kind')}, sealed {stamp})")  # fmt: skip
        parts.append(_marked(title, trajectory / SEGMENTS_DIR / _segment_name(number, segment)))
    parts.append(_marked(f"segment {total} of {total} (this session): "
                         f"{ring.ring_id}#{node.id}", trajectory))  # fmt: skip
    path = trajectory / TRANSCRIPT
    atomic_write_bytes(path, "".join(parts).encode())
    return path


def _segment_line(segment: dict, stamp) -> dict:
    return {"ring": segment["ring"], "node": segment["node"], "kind": segment.get("kind"),
            "sealed": stamp(segment.get("sealed_at")),
            "queries": (segment.get("quota") or {}).get("used")}  # fmt: skip


def resume_context(layout: RingLayout, node: Node) -> dict | None:
    """What a resume node's instructions say about the work it continues."""
    snapshot = resume_snapshot(layout, node)
    if snapshot is None:
        return None
    handoff_path = snapshot / "HANDOFF.json"
    handoff = read_json(handoff_path) if handoff_path.is_file() else {}
    segments = _segments(node)
    latest = segments[-1]

    def stamp(value) -> str:
        if not isinstance(value, int | float):
            return "unknown"
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(value))

    return {
        "identity": node.resume_origin["identity"],
        "ring": latest["ring"],
        "node": latest["node"],
        "cut_at": stamp(handoff.get("cut_at") or latest.get("sealed_at")),
        "why": handoff.get("why") or "no runnable program",
        "summary": handoff.get("summary") or "",
        "changed": {**NO_CHANGES, **(handoff.get("changed_files") or {})},
        "plan": bool(handoff.get("plan")),
        "last_messages": handoff.get("last_messages") or [],
        "segments": [_segment_line(s, stamp) for s in segments],
    }
