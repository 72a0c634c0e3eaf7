"""Rescoring (docs/operations.md#chains): imported scores made under another evaluation spec are
history.

When the parent ring's `search_hash` differs from this ring's, the top
`continue_rescore_top_k` imported nodes by their old seed-0 score are re-executed here
(seed 0 on every search view, as this ring's own executions), after the resume work and
before new work. A rescore the cutoff cuts stays queued: this ring's `stop_manifest.json`
lists it under `rescore_obligations` and the next ring re-executes it, whatever its
`continue_rescore_top_k`, unless its scores are comparable there.
"""

from __future__ import annotations

from pathlib import Path

from ..core import statuses
from ..core.jsonio import read_json, read_json_cached
from ..core.node_state import Node, read_node
from .scores import indexed_nodes, outcome

MANIFEST = "stop_manifest.json"


def choose_rescores(
    entries: list[dict], inherited: list[str], parent_comparable: bool, top_k: int, direction: str
) -> list[str]:
    """Identities to re-execute, in order: the obligations this ring inherits, then (when
    the parent's search_hash differs) the best `top_k` other non-comparable nodes by old
    seed-0 mean, ties broken by identity. Comparable nodes are never re-executed."""
    stale = {e["identity"]: e for e in entries if not e["comparable"]}
    chosen = [ident for ident in inherited if ident in stale]
    if parent_comparable:
        return chosen
    sign = -1.0 if direction == "maximize" else 1.0
    rest = sorted((e for i, e in stale.items() if i not in chosen),
                  key=lambda e: (sign * e["old_mean"], e["identity"]))  # fmt: skip
    return chosen + [e["identity"] for e in rest[:top_k]]


def is_rescore(node: Node) -> bool:
    """A node.json of imported work this ring re-executes."""
    return bool((node.imported or {}).get("rescore"))


def obligations(ring_dir: str | Path) -> list[dict]:
    """This ring's rescores without an outcome on some search view (cut by the cutoff, or
    never run): the next ring re-executes them."""
    ring, layout, entries = indexed_nodes(ring_dir)
    out = []
    for entry in entries:
        if not entry.get("rescore") or entry["status"] != statuses.READY:
            continue
        missing = [view for view in ring.search_views
                   if outcome(layout, entry["id"], view, "s0") is None]  # fmt: skip
        if not missing:
            continue
        node = read_node(layout.node_json(entry["id"]))
        out.append({
            "identity": node.imported["identity"],
            "node": entry["id"],
            "name": node.name,
            "views": missing,
            "old_mean": node.imported.get("old_mean"),
        })  # fmt: skip
    return out


def inherited_obligations(parent_dir: str | Path) -> list[str]:
    """The parent's rescore obligations: from its stop manifest, or (a ring that stopped
    before writing one) from its nodes."""
    manifest = Path(parent_dir) / MANIFEST
    if manifest.is_file():
        listed = read_json(manifest).get("rescore_obligations")
        if listed is not None:
            return [item["identity"] for item in listed]
    return [item["identity"] for item in obligations(parent_dir)]


def rescore_rank(ring_dir: str | Path, node: Node) -> int | None:
    """A rescore node's place in this ring's rescore queue, None for other nodes."""
    if not is_rescore(node):
        return None
    imported = read_json_cached(Path(ring_dir) / "carryover" / "imported.json")
    queue = imported.get("rescore") or []
    ident = node.imported["identity"]
    return queue.index(ident) if ident in queue else len(queue)
