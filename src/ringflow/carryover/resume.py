"""Resume nodes (docs/operations.md#carryover): the verified queue becomes new nodes of this ring.

Each is made from the imported snapshot's `solution/` (execution kind: the same submission,
executed again; engineer kind: a new engineer session in generation 0, before any new
node, see `engineer.py`), with `origin: {kind: resume, ...}`, the carried node's real
`parent` and `resume_origin.segments[]`, every earlier segment first, oldest first. Its
executions are served before new work (`resume_priority`). A static candidate with the same
submission is that work and is not imported a second time.
"""

from __future__ import annotations

from pathlib import Path

from ..core.jsonio import read_json
from ..core.state import Ring
from .importing import IMPORTED

RESUME = "resume"


def resume_entries(ring: Ring) -> list[dict]:
    """The queue's imported work, in queue order (oldest seal first)."""
    path = Path(ring.ring_dir) / IMPORTED
    if not path.is_file():
        return []
    imported = read_json(path)
    by_identity = {item["identity"]: item for item in imported["imported"]}
    return [by_identity[ident] for ident in imported["queue"]]


def resume_fields(ring: Ring, entry: dict) -> dict:
    """What a resume node's node.json says about where its work comes from."""
    return {
        "name": entry["name"],
        "origin": {
            "kind": RESUME,
            "path": str(Path(ring.ring_dir) / entry["copy"] / "solution"),
            "identity": entry["identity"],
            "carry_kind": entry["kind"],
            "seal_sha256": entry["seal_sha256"],
            # Engineer work is resumed by a session of generation 0, before any new node.
            **({"generation": 0} if entry["kind"] == "engineer" else {}),
        },
        "parent": entry.get("parent"),
        "resume_origin": {
            "identity": entry["identity"],
            "kind": entry["kind"],
            "snapshot": entry["copy"],
            "segments": entry["segments"],
        },
    }
