"""`ringflow package RING_DIR [--out DEST]`: a ring's chosen result with its lineage
(docs/operations.md#carryover).

The package holds the ring's `final/` folder as final selection wrote it (the deployable
`solution/` with its MANIFEST.json, FINAL.json), the sealed snapshot of every earlier
segment of every resume node in the chosen node's ancestry (`lineage/<k>-<ring>--<node>/`,
oldest first), and `MANIFEST.json`: the files of `final/` with their sha256 and
`lineage_segments` (each segment's identity, ring, node, kind and seal sha256).

It refuses, naming every problem, when the ring or any ancestor fails the recursive
integrity check (`ancestry.py`: tainted, ledger that does not verify, folder or lock
missing), or when a lineage snapshot no longer verifies against its SEAL.json and ledger
line. The package is built beside DEST and renamed into place whole.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from ..core.clock import load_ring
from ..core.errors import InputError
from ..core.hashing import listing
from ..core.jsonio import atomic_write_json, fsync_dir, fsync_tree, read_json
from ..core.layout import RingLayout
from ..core.node_state import Node, read_node
from ..core.records import RingEvidence
from ..ring.ancestry import ancestor_problems, chain_problems
from .engineer import is_resume, parent_layout
from .importing import Rejected, _check_seal, _copy_verified
from .seal import lock_sha256, sealed_records

MANIFEST = "MANIFEST.json"
LINEAGE_DIR = "lineage"
DEFAULT_DIR = "package"


def ancestry(layout: RingLayout, node_id: str) -> list[tuple[RingLayout, dict]]:
    """The node, its parent, its parent's parent...; a resume node's parent is looked up
    in the ring where its work began."""
    chain: list[tuple[RingLayout, Node]] = []
    seen: set[tuple[Path, str]] = set()
    current: tuple[RingLayout, str] | None = (layout, node_id)
    while current is not None and (current[0].root, current[1]) not in seen:
        seen.add((current[0].root, current[1]))
        where, node_id = current
        path = where.node_json(node_id)
        if not path.is_file():
            raise InputError(f"package: {path} is missing: the chosen node's ancestry is broken")
        node = read_node(path)
        chain.append((where, node))
        parent = node.parent
        current = (parent_layout(where, node), parent) if parent else None
    return chain


def lineage_segments(chain: list[tuple[RingLayout, Node]]) -> list[dict]:
    """Every earlier segment of every resume node in the ancestry, oldest first, once."""
    segments: dict[str, dict] = {}
    for where, node in reversed(chain):
        if not is_resume(node):
            continue
        for segment in node.resume_origin["segments"]:
            identity = f"{segment['ring']}#{segment['node']}"
            segments.setdefault(identity, {
                "identity": identity,
                "ring": segment["ring"],
                "ring_dir": segment["ring_dir"],
                "node": segment["node"],
                "kind": segment.get("kind"),
                "seal_sha256": segment["seal_sha256"],
                "lock_sha256": segment.get("lock_sha256"),
                "ledger_seq": segment.get("ledger_seq"),
                "sealed_at": segment.get("sealed_at"),
                "resumed_by": f"{where.root.name}#{node.id}",
            })  # fmt: skip
    return list(segments.values())


def _integrity_problems(ring_dir: Path, segments: list[dict]) -> list[str]:
    problems = chain_problems(ring_dir)
    for ring in sorted({segment["ring_dir"] for segment in segments}):
        problems += [f"lineage ring {ring} does not verify: {p}"
                     for p in ancestor_problems(Path(ring))]  # fmt: skip
    return list(dict.fromkeys(problems))


def _copy_segment(segment: dict, dest: Path) -> None:
    """Verify one segment's snapshot (ledger line, SEAL.json, every file), then copy it."""
    root = Path(segment["ring_dir"])
    record = sealed_records(RingLayout(root).ledger).get(segment["node"])
    if record is None or record.get("seal_sha256") != segment["seal_sha256"]:
        raise InputError(f"package: {root} no longer records the seal of {segment['identity']} "
                         f"(sha256 {segment['seal_sha256'][:12]})")  # fmt: skip
    try:
        snapshot, seal = _check_seal(root, record, RingEvidence(root))
        _copy_verified(snapshot, seal, dest)
    except Rejected as exc:
        raise InputError(f"package: the snapshot of {segment['identity']} fails: {exc}") from None


def _ancestor(where: RingLayout, node: Node) -> dict:
    origin = (node.origin or {}).get("kind")
    return {"ring": where.root.name, "node": node.id, "origin": origin,
            "parent": node.parent}  # fmt: skip


def package(ring_dir: str | Path, out: str | Path | None = None) -> dict:
    """Write the package to `out` (default RING_DIR/package/, which must not exist)."""
    ring = load_ring(ring_dir)
    layout = RingLayout(Path(ring.ring_dir).resolve())
    final = layout.final_dir / "FINAL.json"
    if not final.is_file():
        raise InputError(f"{ring_dir}: no final/ written yet: nothing to package")
    decision = read_json(final)
    chosen = decision.get("chosen")
    if not chosen:
        raise InputError(f"{final}: no node was chosen ({decision.get('decision')})")
    dest = Path(out).resolve() if out else layout.root / DEFAULT_DIR
    if dest.exists():
        raise InputError(f"package: {dest} already exists; give a new folder (--out)")
    chain = ancestry(layout, chosen)
    segments = lineage_segments(chain)
    problems = _integrity_problems(layout.root, segments)
    if problems:
        raise InputError(f"refusing to package {layout.root}: " + "; ".join(problems[:5]))
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        shutil.copytree(layout.final_dir, staging / "final")
        for number, segment in enumerate(segments, start=1):
            segment["path"] = f"{LINEAGE_DIR}/{number:02d}-{segment['ring']}--{segment['node']}"
            _copy_segment(segment, staging / segment["path"])
        manifest = {
            "ring_id": ring.ring_id,
            "ring_dir": str(layout.root),
            "lock_sha256": lock_sha256(layout.root),
            "chosen": chosen,
            "decision": decision.get("decision"),
            "final": {"path": "final", "files": listing(staging / "final")},
            "ancestry": [_ancestor(where, node) for where, node in chain],
            "lineage_segments": segments,
            "written_at": time.time(),
        }
        atomic_write_json(staging / MANIFEST, manifest)
        staging.chmod(0o755)
        fsync_tree(staging)
        staging.rename(dest)
        fsync_dir(dest.parent)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return manifest
