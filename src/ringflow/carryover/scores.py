"""Scored work a continuing ring imports from its parent (docs/operations.md#chains).

A ring hands on every candidate node it knows a seed-0 score for on each view the score
covers: its own nodes scored here, and the nodes it imported itself (so the import is
transitive along the chain). Each score is a record of one execution on a search view
(seed 0, and seeds 1 and 2 once promoted; never a guard or final view) with where it was
made: the ring, the node and that ring's `search_hash`. A record is **comparable** in a
ring whose `search_hash` is the same; only comparable records stand in for this ring's own
executions (`imported_score`), the others are kept for the record and never ranked.

The continuing ring's nodes made from them have `origin.kind: imported`; their submissions
are copied into the ring and checked against the tree hash they were scored with.
"""

from __future__ import annotations

from pathlib import Path
from statistics import fmean

from ..core import statuses
from ..core.clock import load_ring
from ..core.jsonio import read_json, read_json_cached
from ..core.layout import RingLayout
from ..core.node_state import Node, read_node, read_result
from ..core.safetree import read_head
from ..core.state import Ring
from ..scoring import usable

IMPORTED = "imported"
# An imported node whose scores are not comparable and that is not re-executed here: kept
# for the record (lineage, refuted directions), never executed, ranked or promoted.
HISTORY = statuses.HISTORY
# Seed 0 and the promotion seeds: the only scores a ring hands on.
SCORED_VARIANTS = ("s0", "s1", "s2")


def outcome(layout: RingLayout, node: str, view: str, variant: str) -> dict | None:
    """This ring's own score of an execution that ran to an outcome (an interrupted run,
    cut by the cutoff or stopped, has none)."""
    score_path = layout.score(node, view, variant)
    if not score_path.is_file():
        return None
    result_path = layout.result(node, view, variant)
    if result_path.is_file() and read_result(result_path).status == statuses.INTERRUPTED:
        return None
    return read_json(score_path)


def own_record(ring: Ring, node: str, view: str, variant: str, score: dict) -> dict:
    return {
        "score": score.get("score"),
        "valid": bool(score.get("valid")),
        "scored": bool(score.get("scored")),
        "reason": score.get("reason", ""),
        "ring": ring.ring_id,
        "node": node,
        "view": view,
        "variant": variant,
        "search_hash": ring.search_hash,
    }


def score_sheet(ring: Ring, layout: RingLayout, node: Node) -> dict[str, dict[str, dict]]:
    """{view: {variant: record}}: the node's own outcome where it has one, else the record
    it was imported with. An outcome without a score (a crash, invalid output) is this
    ring's verdict and stands: such a node is not handed on as scored."""
    imported = (node.imported or {}).get("scores") or {}
    views = list(ring.search_views) + [v for v in imported if v not in ring.search_views]
    sheet: dict[str, dict[str, dict]] = {}
    for view in views:
        searched = view in ring.search_views
        for variant in SCORED_VARIANTS:
            own = outcome(layout, node.id, view, variant) if searched else None
            record = (
                own_record(ring, node.id, view, variant, own)
                if own is not None
                else (imported.get(view) or {}).get(variant)
            )
            if record is not None:
                sheet.setdefault(view, {})[variant] = record
    return sheet


def s0_mean(scores: dict[str, dict[str, dict]], views: list[str] | None = None) -> float | None:
    """Mean seed-0 score over `views` (default: every view of the sheet); None if any is
    missing or has no usable score."""
    views = list(scores) if views is None else views
    values = [usable((scores.get(v) or {}).get("s0"), "") for v in views]
    if not values or any(v is None for v in values):
        return None
    return fmean(values)


def _expected_views(ring: Ring, node: Node) -> list[str]:
    """The views a node's seed-0 score covers: those it was imported with, else the ring's."""
    imported = (node.imported or {}).get("scores")
    if imported:
        return sorted(v for v, variants in imported.items() if "s0" in variants)
    return list(ring.search_views)


def indexed_nodes(ring_dir: str | Path) -> tuple[dict, RingLayout, list[dict]]:
    """The ring, its layout and its node index entries (none before its nodes exist)."""
    ring = load_ring(ring_dir)
    layout = RingLayout(Path(ring.ring_dir))
    entries = read_json(layout.nodes_index)["nodes"] if layout.nodes_index.is_file() else []
    return ring, layout, entries


def exported(ring_dir: str | Path) -> list[dict]:
    """What a ring hands to a ring continuing it: every candidate node scored on seed 0 on
    each view its score covers, with its score sheet and where it came from."""
    ring, layout, entries = indexed_nodes(ring_dir)
    out = []
    for entry in entries:
        if entry["role"] != "candidate" or entry["status"] not in (statuses.READY, HISTORY):
            continue
        node = read_node(layout.node_json(entry["id"]))
        sheet = score_sheet(ring, layout, node)
        views = _expected_views(ring, node)
        mean = s0_mean(sheet, views)
        if mean is None or not node.tree_hash:
            continue
        mine = f"{ring.ring_id}#{entry['id']}"
        earlier = node.imported or {}
        out.append({
            "identity": earlier.get("identity") or mine,
            "via": [*(earlier.get("via") or []), mine],
            "ring_id": ring.ring_id,
            "ring_dir": ring.ring_dir,
            "node": entry["id"],
            "name": node.name or entry["id"],
            "tree_hash": node.tree_hash,
            "tree_ignore": list(ring.tree_ignore or []),
            "submission": str(layout.submission(entry["id"])),
            "parent": node.parent,
            "status": entry["status"],
            "views": views,
            "old_mean": mean,
            "scores": {v: sheet[v] for v in sheet},
        })  # fmt: skip
    return out


def without_views(scores: dict, views: set[str]) -> dict:
    """The sheet without the given views: a guard or final view's score is never imported."""
    return {v: variants for v, variants in scores.items() if v not in views}


def comparable(ring: Ring, scores: dict) -> bool:
    """Every seed-0 record on this ring's search views was made under its search_hash."""
    for view in ring.search_views:
        record = (scores.get(view) or {}).get("s0")
        if record is None or record.get("search_hash") != ring.search_hash:
            return False
    return True


def refuted_among(entries: list[dict], direction: str) -> dict[str, dict]:
    """Per identity: the imported nodes that scored worse than their parent on seed 0, both
    scores made under one search_hash (so comparable with each other)."""
    sign = 1.0 if direction == "maximize" else -1.0
    by_node = {(e["ring_id"], e["node"]): e for e in entries}
    refuted = {}
    for entry in entries:
        parent = by_node.get((entry["ring_id"], entry["parent"]))
        if parent is None:
            continue
        hashes = {r["s0"]["search_hash"] for e in (entry, parent)
                  for r in e["scores"].values() if "s0" in r}  # fmt: skip
        if len(hashes) != 1 or entry["views"] != parent["views"]:
            continue
        if sign * (entry["old_mean"] - parent["old_mean"]) < 0:
            refuted[entry["identity"]] = {
                "parent_identity": parent["identity"],
                "score": entry["old_mean"],
                "parent_score": parent["old_mean"],
                "search_hash": hashes.pop(),
                "ring": entry["ring_id"],
            }
    return refuted


def imported_score(
    layout: RingLayout, node: str, view: str, variant: str, search_hash: str
) -> dict | None:
    """The comparable imported record standing in for this ring's own execution, or None.

    Only a record made under this ring's search_hash is returned: a non-comparable one is
    history and never ranked against this ring's scores.
    """
    path = layout.node_json(node)
    if not path.is_file():
        return None
    block = Node.from_record(read_json_cached(path), source=path).imported
    if not block:
        return None
    found = ((block.get("scores") or {}).get(view) or {}).get(variant)
    if found is None or found.get("search_hash") != search_hash:
        return None
    return found


def _method(layout: RingLayout, node: str) -> str:
    text = read_head(layout.submission(node) / "METHOD.md", 8000)  # any size, any content
    return text.strip()[:2000] if text is not None else "(no METHOD.md)"


def imported_refuted(layout: RingLayout, index: dict) -> list[dict]:
    """Refuted directions the chain found before this ring (nodes that scored worse than
    their parent where they were scored), for the engineers' instructions."""
    out = []
    for entry in index["nodes"]:
        if not entry.get(IMPORTED):
            continue
        node = read_node(layout.node_json(entry["id"]))
        block = node.imported or {}
        refuted = block.get("refuted")
        if not refuted:
            continue
        out.append({
            "node": entry["id"],
            "parent": node.parent or refuted["parent_identity"],
            "score": refuted["score"],
            "parent_score": refuted["parent_score"],
            "method": _method(layout, entry["id"]),
            "ring": refuted["ring"],
            "comparable": refuted["search_hash"] == block.get("this_search_hash"),
        })  # fmt: skip
    return out
