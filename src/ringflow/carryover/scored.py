"""The import checkpoint's second half (docs/operations.md#chains): the parent ring's scored nodes,
promotion scores, refuted directions and rescoring obligations, and its store index.

`import_scored` writes what it takes into `carryover/imported.json` (`scored`,
`comparability`, `rescore`, `obligations_inherited`, `store`); the node import then makes
one node per scored entry (`imported_fields`, `settle_imported`). Guard- and final-view
scores are never imported: only seed 0 and the promotion seeds on search views are handed
on, and a view that is a guard or final view here is dropped as well.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..candidate import load_solution
from ..core import statuses
from ..core.clock import load_ring
from ..core.errors import CandidateError, RingflowError
from ..core.hashing import solution_tree_hash
from ..core.jsonio import read_json
from ..core.layout import RingLayout
from ..core.ledger import Ledger, emit_event
from ..core.records import RingEvidence
from ..core.state import Ring
from ..weights.store import WeightsStore
from .rescoring import choose_rescores, inherited_obligations, obligations
from .scores import (
    HISTORY,
    IMPORTED,
    comparable,
    exported,
    refuted_among,
    s0_mean,
    without_views,
)


def _store_index(ring: Ring, parent: Ring) -> dict:
    """The parent's weights keys and whether this ring's store holds them (replayed here
    instead of trained again)."""
    index_path = RingLayout(Path(parent.ring_dir)).nodes_index
    keys = sorted(read_json(index_path).get("keys") or {}) if index_path.is_file() else []
    store = WeightsStore(ring.store)
    held = [key for key in keys if store.find(key) is not None]
    return {"parent_store": parent.store, "this_store": ring.store,
            "shared": Path(parent.store) == Path(ring.store),
            "keys": len(keys), "keys_in_store": len(held)}  # fmt: skip


def score_fault(evidence: RingEvidence, parent_id: str, entry: dict) -> str | None:
    """Why an exported node's scores cannot be trusted: its node.json, or a result.json or
    score.json its sheet was made from, is not what the parent's ledger hashed (or that
    ledger does not verify against its store's anchors); None when every one verifies."""
    node = entry["node"]
    paths = [f"nodes/{node}/node.json"]
    for view, variants in sorted(entry["scores"].items()):
        for variant, record in sorted(variants.items()):
            if record.get("ring") == parent_id and record.get("node") == node:
                folder = f"nodes/{node}/exec/{view}/{variant}"
                paths += [f"{folder}/result.json", f"{folder}/score.json"]
    for rel in paths:
        fault = evidence.fault(rel)
        if fault is not None:
            return fault
    return None


def _reject_scores(layout: RingLayout, out: dict, entry: dict, reason: str) -> None:
    ident = entry["identity"]
    out.setdefault("scores_rejected", []).append(
        {"identity": ident, "ring_dir": entry["ring_dir"], "node": entry["node"],
         "reason": reason})  # fmt: skip
    if not _logged(layout.ledger, "carryover_rejected", ident):
        Ledger(layout.ledger).append("carryover_rejected", identity=ident, what="scores",
                                     reason=reason)  # fmt: skip
    emit_event(layout.root, "carryover_rejected", identity=ident, what="scores", reason=reason)


def import_scored(ring: Ring, layout: RingLayout, previous: Path, out: dict) -> None:
    """What this ring takes of its parent's scored work, and what it re-executes.

    A node whose scores do not verify against the parent's ledger and its store's anchors
    is not imported at all (`carryover_rejected`, with the reason): an edited score is
    never ranked here, nor counted as a refuted direction or a reason to rescore."""
    parent = load_ring(previous)
    hidden = {*(ring.guard_views or []), ring.final_view}
    direction = ring.task.direction
    evidence = RingEvidence(previous)
    entries = []
    for entry in exported(previous):
        fault = score_fault(evidence, parent.ring_id, entry)
        if fault is not None:
            _reject_scores(layout, out, entry, fault)
            continue
        entry["scores"] = without_views(entry["scores"], hidden)
        entry["views"] = [v for v in entry["views"] if v not in hidden]
        entry["old_mean"] = s0_mean(entry["scores"], entry["views"]) if entry["views"] else None
        if entry["old_mean"] is None:
            continue
        entry["comparable"] = comparable(ring, entry["scores"])
        entries.append(entry)
    same = parent.search_hash == ring.search_hash
    top_k = ring.config.continue_rescore_top_k
    inherited = inherited_obligations(previous)
    rescore = choose_rescores(entries, inherited, same, top_k, direction)
    refuted = refuted_among(entries, direction)
    for entry in entries:
        entry["rescore"] = entry["identity"] in rescore
        entry["refuted"] = refuted.get(entry["identity"])
    out["scored"] = entries
    out["comparability"] = {
        "search_hash": ring.search_hash,
        "parent_search_hash": parent.search_hash,
        "comparable": same,
        "continue_rescore_top_k": top_k,
        "comparable_nodes": sum(e["comparable"] for e in entries),
        "history_nodes": sum(not e["comparable"] and not e["rescore"] for e in entries),
    }
    out["rescore"] = rescore
    out["obligations_inherited"] = inherited
    out["obligations_discharged"] = [i for i in inherited if i not in rescore]
    out["store"] = _store_index(ring, parent)
    if not _logged(layout.ledger, "scores_imported"):
        Ledger(layout.ledger).append(
            "scores_imported",
            parent=parent.ring_id,
            parent_search_hash=parent.search_hash,
            comparable=same,
            nodes=[e["identity"] for e in entries],
            rescore=rescore,
        )


def _logged(ledger_path: Path, kind: str, identity: str | None = None) -> bool:
    for line in ledger_path.read_bytes().splitlines() if ledger_path.exists() else []:
        try:
            record = json.loads(line)
            if record.get("kind") == kind and (
                identity is None or record.get("identity") == identity
            ):
                return True
        except (ValueError, AttributeError):
            continue
    return False


def scored_entries(ring: Ring) -> list[dict]:
    """The scored work imported.json lists, in the parent's node order."""
    path = Path(ring.ring_dir) / "carryover" / "imported.json"
    return list(read_json(path).get("scored") or []) if path.is_file() else []


def imported_fields(ring: Ring, entry: dict) -> dict:
    """What an imported node's node.json says about where it and its scores come from."""
    return {
        "name": entry["name"],
        "origin": {
            "kind": IMPORTED,
            "path": entry["submission"],
            "ring": entry["ring_id"],
            "node": entry["node"],
            "identity": entry["identity"],
        },
        "parent": None,
        IMPORTED: {
            "identity": entry["identity"],
            "via": entry["via"],
            "from": {
                "ring_id": entry["ring_id"],
                "ring_dir": entry["ring_dir"],
                "node": entry["node"],
                "parent": entry["parent"],
            },
            "tree_hash": entry["tree_hash"],
            "views": entry["views"],
            "scores": entry["scores"],
            "old_mean": entry["old_mean"],
            "comparable": entry["comparable"],
            "rescore": entry["rescore"],
            "refuted": entry["refuted"],
            "this_search_hash": ring.search_hash,
        },
    }


def submission_problem(entry: dict, max_bytes: int) -> str | None:
    """Why the sender's submission cannot be imported: missing, no longer a candidate, or
    not the tree its scores were made with."""
    folder = Path(entry["submission"])
    try:
        solution = load_solution(folder, max_bytes)
        tree, _ = solution_tree_hash(folder, set(solution.per_view_paths), entry["tree_ignore"])
    except (CandidateError, RingflowError, OSError) as exc:
        return f"its submission {folder} cannot be read: {exc}"
    if tree != entry["tree_hash"]:
        return (f"its submission {folder} changed since it was scored (tree {tree[:12]}, "
                f"scored as {entry['tree_hash'][:12]})")  # fmt: skip
    return None


def settle_imported(node: dict, sender_ids: dict[tuple[str, str], str]) -> None:
    """Status and parent of a node made from imported work, in place: comparable or
    re-executed work is `ready`; other work is `history` (never executed or ranked)."""
    block = node[IMPORTED]
    origin = block["from"]
    parent = sender_ids.get((origin["ring_id"], origin["parent"])) if origin["parent"] else None
    node["parent"] = parent
    if node.get("status") != statuses.READY:
        return
    if not (block["comparable"] or block["rescore"]):
        node["status"] = HISTORY
        node["executions"] = {}
    sender_ids[(origin["ring_id"], origin["node"])] = node["id"]


def summary_lines(ring_dir: str | Path, imported: dict) -> list[str]:
    """The one-screen summary's lines on scored work: what came from the parent, whether
    it was comparable, what was rescored, and the rescores owed to the next ring."""
    scored = imported.get("scored") or []
    comparability = imported.get("comparability") or {}
    lines = []
    if scored or imported.get("rescore"):
        spec = "same" if comparability.get("comparable") else "another"
        lines.append(f"scores in: {len(scored)} scored node(s) of the parent ({spec} "
                     f"search_hash): {comparability.get('comparable_nodes', 0)} comparable, "
                     f"{len(imported.get('rescore') or [])} rescored, "
                     f"{comparability.get('history_nodes', 0)} history")  # fmt: skip
        lines += [f"  rescored {identity}" for identity in imported.get("rescore") or []]
    owed = obligations(ring_dir)
    if owed:
        lines.append(f"rescores owed: {len(owed)} cut by the cutoff, for the next ring")
        lines += [f"  {item['node']} ({item['identity']})" for item in owed]
    return lines
