"""The seal transaction (docs/operations.md#carryover): a complete, verifiable snapshot of
unfinished work, or none.

Steps, in order, each durable before the next:

1. stage: copy the work's files into `nodes/<id>/.carryover-<random>/` (regular files only;
   links, special files and files over `max_file_mb` are skipped and listed), hashing the
   bytes as they are written, then HANDOFF.json;
2. seal: write SEAL.json (every file's sha256 and size, what was skipped and why, the
   ring's lock hash), fsync the whole staging folder;
3. rename the staging folder to `nodes/<id>/carryover/` (the snapshot now exists, whole);
4. record `carryover_sealed` in the ledger with the sha256 of SEAL.json itself;
5. settle the node: node.json `status: carried_over` with its `carryover` block.

A snapshot counts only once its ledger entry exists (import checks the seal against the
ledger). Running the seal again after a crash at any point finishes the transaction: staging
leftovers are removed, a renamed snapshot without its ledger entry is checked against its
SEAL.json and recorded (or, damaged, removed and sealed afresh), a recorded seal settles its
node. Nothing is sealed twice.

The kinds differ only in which files they hand over (`SealRequest.sources`) and what the
hand-over says: `execution` (docs/operations.md#carryover) gives the submission and the grace
checkpoint; the engineer kind adds PLAN.json and trajectory/ the same way.

The same transaction writes an evidence seal (docs/operations.md#carryover: an engineer session cut
at the hand-over point with a runnable program, whose submission is executed as normal): its
`SealTarget` puts it in `nodes/<id>/evidence/` (staged in `.evidence-<random>/`), records it
as `evidence_sealed`, and leaves the node's status alone (step 5 does nothing). A node can
hold both, evidence of its session and a carryover seal of its cut run. Evidence is never
imported or resumed: the import reads only `carryover_sealed` records.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import secrets
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..core import statuses
from ..core.errors import RingflowError
from ..core.frozen import Frozen, frozen_record
from ..core.jsonio import atomic_write_json, canonical_json, fsync_dir, fsync_tree, read_json
from ..core.layout import RingLayout
from ..core.ledger import Ledger, emit_event
from ..core.node_state import read_node, write_node
from ..core.safetree import remove_tree
from ..core.state import Ring
from ..core.statuses import NodeStatus
from .snapshot import copy_hashing, file_sha256, walk_checked, walk_entries, why_skipped

SEAL_FILE = "SEAL.json"
HANDOFF_FILE = "HANDOFF.json"
SNAPSHOT_DIR = "carryover"
STAGING_PREFIX = ".carryover-"
SEALED = "carryover_sealed"
EVIDENCE_DIR = "evidence"
EVIDENCE_STAGING_PREFIX = ".evidence-"
EVIDENCE_SEALED = "evidence_sealed"
EVIDENCE_KIND = "evidence"
EVIDENCE_WHY = "cut at the hand-over with a runnable program"
FORMAT = 1

# Tests stop the sealing process at one step with SIGKILL, as a crash would.
STOP_ENV = "RINGFLOW_SEAL_STOP_AT"
STEPS = ("staged", "sealed", "renamed", "recorded", "settled")


def _stop_point(step: str) -> None:
    if os.environ.get(STOP_ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)


@frozen_record
class SealTarget(Frozen):
    """Where a seal is written, how the ledger records it, and whether it settles the node."""

    folder: str  # under nodes/<id>/
    staging_prefix: str  # of the staging folder beside it
    ledger_kind: str
    settles: bool  # carried_over once recorded; evidence leaves the node as it is
    why: str | None = None  # recorded with an evidence seal

    def record_fields(self, kind: str) -> dict:
        return {"carry_kind": kind} if self.settles else {"why": self.why}


CARRYOVER = SealTarget(SNAPSHOT_DIR, STAGING_PREFIX, SEALED, settles=True)
EVIDENCE = SealTarget(EVIDENCE_DIR, EVIDENCE_STAGING_PREFIX, EVIDENCE_SEALED, settles=False,
                      why=EVIDENCE_WHY)  # fmt: skip
TARGETS = (CARRYOVER, EVIDENCE)


@dataclass
class SealRequest:
    """What one node hands over: files to snapshot, the hand-over, the node's record."""

    node_id: str
    kind: str
    # (path inside the snapshot, source file or folder); a missing source is left out.
    sources: list[tuple[str, Path]]
    handoff: dict
    settle: dict = field(default_factory=dict)
    target: SealTarget = CARRYOVER


def identity(ring_id: str, node_id: str) -> str:
    """Work identity (docs/operations.md#carryover): the ring and node of whoever sealed it."""
    return f"{ring_id}#{node_id}"


def lock_sha256(ring_dir: Path) -> str:
    return hashlib.sha256(RingLayout(Path(ring_dir)).ring_json.read_bytes()).hexdigest()


def snapshot_dir(layout: RingLayout, node_id: str, target: SealTarget = CARRYOVER) -> Path:
    return layout.node_dir(node_id) / target.folder


def listed(node_id: str, record: dict, target: SealTarget = CARRYOVER) -> dict:
    """A recorded seal as `carryover/seals.json` and `stop_manifest.json` list it."""
    return {
        "node": node_id,
        "identity": record["identity"],
        "kind": record["carry_kind"] if target.settles else EVIDENCE_KIND,
        "seal_sha256": record["seal_sha256"],
        "ledger_seq": record["seq"],
        "snapshot": f"nodes/{node_id}/{target.folder}",
    }


def sealed_records(ledger_path: Path, kind: str = SEALED) -> dict[str, dict]:
    """Per node, the `carryover_sealed` record (or the records of another seal `kind`) of a
    ring's ledger (lines that parse)."""
    out: dict[str, dict] = {}
    try:
        lines = Path(ledger_path).read_bytes().splitlines()
    except FileNotFoundError:
        return out
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("kind") == kind:
            out.setdefault(record.get("node"), record)
    return out


def seal_problems(folder: Path, seal: dict) -> list[str]:
    """How a snapshot folder differs from its SEAL.json: changed, missing, added files,
    links; an empty list when every file is exactly what was sealed."""
    problems = []
    listed = {}
    for item in seal.get("files") or []:
        if isinstance(item, dict) and isinstance(item.get("path"), str):
            listed[item["path"]] = item
    present = {}
    for rel, info in walk_entries(folder):
        if rel == SEAL_FILE:
            continue
        present[rel] = info
    for rel, info in present.items():
        if rel not in listed:
            problems.append(f"{rel}: not in SEAL.json (added)")
        elif why_skipped(info, float("inf")) is not None:
            problems.append(f"{rel}: is a {why_skipped(info, float('inf'))}, sealed as a file")
    for rel, item in listed.items():
        if rel not in present:
            problems.append(f"{rel}: missing (sealed with sha256 {str(item.get('sha256'))[:12]})")
            continue
        if why_skipped(present[rel], float("inf")) is not None:
            continue
        digest, size = file_sha256(folder / rel)
        if digest != item.get("sha256") or size != item.get("size"):
            problems.append(f"{rel}: content differs from SEAL.json (sha256 {digest[:12]}, "
                            f"sealed {str(item.get('sha256'))[:12]})")  # fmt: skip
    return problems


def _stage(ring: Ring, request: SealRequest, staging: Path) -> dict:
    max_bytes = int(ring.config.max_file_mb * 1024**2)
    files, skipped = [], []
    for prefix, source in request.sources:
        if not source.exists() and not source.is_symlink():
            continue
        entries, left = [("", source.lstat())], []
        if source.is_dir() and not source.is_symlink():
            entries, left = walk_checked(source)
        skipped += [{**item, "path": f"{prefix}/{item['path']}".rstrip("/")} for item in left]
        for rel, info in entries:
            inside = f"{prefix}/{rel}" if rel else prefix
            why = why_skipped(info, max_bytes)
            if why is not None:
                skipped.append({"path": inside, "why": why, "size": info.st_size})
                continue
            digest, size = copy_hashing(source / rel if rel else source, staging / inside)
            files.append({"path": inside, "sha256": digest, "size": size})
    handoff = {**request.handoff, "skipped": skipped}
    atomic_write_json(staging / HANDOFF_FILE, handoff)
    digest, size = file_sha256(staging / HANDOFF_FILE)
    files.append({"path": HANDOFF_FILE, "sha256": digest, "size": size})
    return {"files": sorted(files, key=lambda f: f["path"]), "skipped": skipped}


def _write_seal(ring: Ring, request: SealRequest, staging: Path, listing: dict) -> bytes:
    seal = {
        "format": FORMAT,
        "kind": request.kind,
        "identity": identity(ring.ring_id, request.node_id),
        "ring_id": ring.ring_id,
        "node": request.node_id,
        "lock_sha256": lock_sha256(Path(ring.ring_dir)),
        "max_file_mb": ring.config.max_file_mb,
        "files": listing["files"],
        "skipped": listing["skipped"],
        "sealed_at": time.time(),
    }
    data = canonical_json(seal) + b"\n"
    with open(staging / SEAL_FILE, "xb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    return data


def _make_immutable(folder: Path) -> None:
    for dirpath, _dirnames, filenames in os.walk(folder):
        for name in filenames:
            os.chmod(Path(dirpath) / name, 0o444)


def _record(ring: Ring, layout: RingLayout, request: SealRequest, kind: str, seal: dict,
            seal_sha: str) -> dict:  # fmt: skip
    return Ledger(layout.ledger).append(
        request.target.ledger_kind,
        node=request.node_id,
        identity=identity(ring.ring_id, request.node_id),
        **request.target.record_fields(kind),
        seal_sha256=seal_sha,
        files=len(seal["files"]),
        skipped=len(seal["skipped"]),
    )


def _settle(layout: RingLayout, request: SealRequest, record: dict) -> dict | None:
    """Step 5: the node is `carried_over` with its seal; an evidence seal settles nothing."""
    if not request.target.settles:
        return None
    path = layout.node_json(request.node_id)
    node = read_node(path)
    block = {
        "kind": record["carry_kind"],
        "identity": record["identity"],
        "seal_sha256": record["seal_sha256"],
        "ledger_seq": record["seq"],
        "snapshot": f"nodes/{request.node_id}/{SNAPSHOT_DIR}",
        **request.settle,
    }
    if node.status == statuses.CARRIED_OVER and node.carryover == block:
        return node.to_record()
    node = dataclasses.replace(node, status=NodeStatus.CARRIED_OVER, carryover=block)
    write_node(layout.root, path, node)
    return node.to_record()


def seal_node(ring: Ring, request: SealRequest) -> dict:
    """Seal one node's work (or finish an interrupted seal) into its request's target;
    returns its ledger record."""
    target = request.target
    layout = RingLayout(Path(ring.ring_dir))
    node_dir = layout.node_dir(request.node_id)
    final = snapshot_dir(layout, request.node_id, target)
    for leftover in node_dir.glob(f"{target.staging_prefix}*"):
        shutil.rmtree(leftover, ignore_errors=True)
    record = sealed_records(layout.ledger, target.ledger_kind).get(request.node_id)
    if record is not None:
        _check_recorded(final, record)
        _settle(layout, request, record)
        return record
    if final.exists():
        record = _recover_unrecorded(ring, layout, request, final)
        if record is not None:
            return record
    staging = node_dir / f"{target.staging_prefix}{secrets.token_hex(6)}"
    staging.mkdir()
    listing = _stage(ring, request, staging)
    _stop_point("staged")
    data = _write_seal(ring, request, staging, listing)
    _make_immutable(staging)
    fsync_tree(staging)
    _stop_point("sealed")
    os.rename(staging, final)
    fsync_dir(node_dir)
    _stop_point("renamed")
    record = _record(ring, layout, request, request.kind, listing,
                     hashlib.sha256(data).hexdigest())  # fmt: skip
    _stop_point("recorded")
    _settle(layout, request, record)
    _stop_point("settled")
    emit_event(layout.root, target.ledger_kind, node=request.node_id,
               **target.record_fields(request.kind), seal_sha256=record["seal_sha256"],
               files=record["files"])  # fmt: skip
    return record


def _check_recorded(final: Path, record: dict) -> None:
    seal_path = final / SEAL_FILE
    if not seal_path.is_file():
        raise RingflowError(f"{final}: the ledger records a seal (line {record['seq']}) but "
                            "the snapshot or its SEAL.json is gone")  # fmt: skip
    digest, _ = file_sha256(seal_path)
    if digest != record["seal_sha256"]:
        raise RingflowError(
            f"{seal_path}: differs from the seal the ledger records (line {record['seq']}): "
            "the snapshot was changed after sealing"
        )


def _recover_unrecorded(ring, layout, request, final: Path) -> dict | None:
    """A snapshot renamed into place before its ledger entry: record it if it verifies,
    else remove it (it was never a seal) and let the caller seal afresh."""
    seal_path = final / SEAL_FILE
    problems = ["SEAL.json missing"]
    seal = None
    if seal_path.is_file():
        try:
            seal = read_json(seal_path)
            problems = seal_problems(final, seal)
        except RingflowError as exc:
            problems = [str(exc)]
    if problems or seal is None:
        emit_event(layout.root, f"{request.target.folder}_seal_discarded", node=request.node_id,
                   problems=problems[:5])  # fmt: skip
        _remove_tree(final)
        return None
    digest, _ = file_sha256(seal_path)
    record = _record(ring, layout, request, seal["kind"], seal, digest)
    _settle(layout, request, record)
    emit_event(layout.root, f"{request.target.folder}_seal_recovered", node=request.node_id,
               seal_sha256=digest)  # fmt: skip
    return record


def _remove_tree(folder: Path) -> None:
    remove_tree(folder)  # makes each folder writable as it goes


def seal_check(layout: RingLayout) -> list[str]:
    """Every seal the ring's ledger records, carryover and evidence, against its snapshot
    (for `ringflow verify`)."""
    problems = []
    for target in TARGETS:
        for node, record in sealed_records(layout.ledger, target.ledger_kind).items():
            folder = snapshot_dir(layout, node, target)
            try:
                _check_recorded(folder, record)
                seal = read_json(folder / SEAL_FILE)
                problems += [f"{folder}: {p}" for p in seal_problems(folder, seal)]
            except RingflowError as exc:
                problems.append(str(exc))
    return problems
