"""Carryover of the `execution` kind (docs/operations.md#carryover): a candidate whose seed-0 run on
a search view was cut by the cutoff is sealed, with its submission and what the cut runs left, so
that the next ring executes the same submission again.

`seal_ring` runs when the search has ended: it seals every such node, and every engineer
session carried over (the `engineer` kind, carryover/engineer.py), finishing any seal a
crash interrupted, and writes `carryover/seals.json`, the ring's list of seals. It also
seals the evidence of every engineer session cut at the hand-over point with a runnable
program (carryover/evidence.py), listed apart (`evidence`): evidence is never carried.
"""

from __future__ import annotations

import time
from pathlib import Path

from ..core import statuses
from ..core.clock import load_ring
from ..core.jsonio import atomic_write_json, read_json
from ..core.layout import RingLayout
from ..core.ledger import emit_event
from ..core.node_state import Node, read_node, read_result
from ..core.state import Ring
from . import engineer, evidence
from .checkpoint import AUTHORITATIVE_VARIANT, CHECKPOINT_DIR, is_carried_cut
from .seal import EVIDENCE, EVIDENCE_SEALED, SealRequest, listed, seal_node, sealed_records

KIND = "execution"
EXEC_FILES = ("result.json", "stdout.log", "stderr.log")


def cut_runs(ring: Ring, layout: RingLayout, node_id: str) -> tuple[list[dict], list[dict]]:
    """(seed-0 runs a seal takes, seed-0 runs cut but left with processes after the stop)."""
    cut, unreaped = [], []
    for view in ring.search_views:
        path = layout.result(node_id, view, AUTHORITATIVE_VARIANT)
        if not path.is_file():
            continue
        result = read_result(path)
        if result.status != statuses.INTERRUPTED or not result.budget_cut:
            continue
        run = {
            "view": view,
            "variant": AUTHORITATIVE_VARIANT,
            "reason": result.reason if result.reason is not None else "",
            "started": (result.wall_s or 0) > 0
            or result.exit_code is not None
            or result.signal is not None,
            "wall_s": result.wall_s,
            "weights_mode": result.weights_mode,
        }
        (cut if is_carried_cut(result) else unreaped).append(
            {**run, "reap_left": list(result.reap_left or [])}
        )
    return cut, unreaped


def execution_request(ring: Ring, layout: RingLayout, node: Node, cut: list[dict]) -> SealRequest:
    node_id = node.id
    sources: list[tuple[str, Path]] = [("solution", layout.submission(node_id))]
    for run in cut:
        folder = layout.exec_dir(node_id, run["view"], run["variant"])
        inside = f"checkpoint/{run['view']}/{run['variant']}"
        sources.append((f"{inside}/output", folder / "output"))
        # The weights folders as the run left them, at their paths in the solution.
        sources.append((f"{inside}/solution", folder / CHECKPOINT_DIR))
        sources += [(f"{inside}/{name}", folder / name) for name in EXEC_FILES]
    earlier = list((node.resume_origin or {}).get("segments") or [])
    views = ", ".join(f"{r['view']}/{r['variant']}" for r in cut)
    handoff = {
        "kind": KIND,
        "ring_id": ring.ring_id,
        "node": node_id,
        "name": node.name,
        "summary": f"seed-0 run cut by the cutoff on {views}; the next ring executes the "
        "same submission again (a checkpoint is evidence only: it trains from scratch)",
        "cut": cut,
        "run_py": (layout.submission(node_id) / "run.py").is_file(),
        "command": (node.solution or {}).get("command"),
        "tree_hash": node.tree_hash,
        "parent": node.parent,
        "origin": dict(node.origin) if node.origin else None,
        "queries_used": None,
        "segments": earlier,
        "sealed_at": time.time(),
    }
    return SealRequest(node_id=node_id, kind=KIND, sources=sources, handoff=handoff,
                       settle={"cut": cut})  # fmt: skip


def seal_ring(ring_dir: str | Path) -> dict:
    """Seal every candidate whose authoritative run was cut, and the evidence of every
    session cut with a runnable program; write carryover/seals.json."""
    ring = load_ring(ring_dir)
    layout = RingLayout(Path(ring.ring_dir))
    index = read_json(layout.nodes_index)
    recorded = sealed_records(layout.ledger)
    recorded_evidence = sealed_records(layout.ledger, EVIDENCE_SEALED)
    seals, refused, evidence_seals, evidence_refused = [], [], [], []
    for entry in index["nodes"]:
        if entry["role"] != "candidate":
            continue
        if evidence.cut_with_program(layout, entry["id"]):
            record = _seal_evidence(ring, layout, entry["id"], recorded_evidence,
                                    evidence_refused)  # fmt: skip
            if record is not None:
                evidence_seals.append(listed(entry["id"], record, EVIDENCE))
        if entry["status"] not in (statuses.READY, statuses.CARRIED_OVER):
            continue
        if entry.get("imported"):
            # Imported scored work is not sealed: a cut rescore is an obligation instead.
            continue
        node = read_node(layout.node_json(entry["id"]))
        if entry["status"] == statuses.CARRIED_OVER:
            request = _engineer_request(ring, layout, node, recorded, refused)
            if request is None:
                continue
            record = seal_node(ring, request)
            seals.append(listed(entry["id"], record))
            continue
        cut, unreaped = cut_runs(ring, layout, entry["id"])
        if unreaped and entry["id"] not in recorded:
            # Processes may still be writing its files (docs/operations.md#health-supervision):
            # never sealed.
            refused.append({"node": entry["id"], "reason": "processes were left after the "
                            "stop (reap_left)", "runs": unreaped})  # fmt: skip
            emit_event(layout.root, "carryover_refused", node=entry["id"], reason="reap_left")
            continue
        if not cut and entry["id"] not in recorded:
            continue
        record = seal_node(ring, execution_request(ring, layout, node, cut))
        seals.append(listed(entry["id"], record))
    listing = {"ring_id": ring.ring_id, "seals": seals, "refused": refused,
               "evidence": evidence_seals, "evidence_refused": evidence_refused}  # fmt: skip
    atomic_write_json(layout.root / "carryover" / "seals.json", listing)
    return listing


def _seal_evidence(ring, layout, node_id: str, recorded: dict, refused: list) -> dict | None:
    """Seal (or finish sealing) a session's evidence; None when its writers may not have
    stopped (refused and listed)."""
    if node_id not in recorded:
        why = engineer.not_sealable(layout, node_id)
        if why is not None:
            refused.append({"node": node_id, "reason": why})
            emit_event(layout.root, "evidence_refused", node=node_id, reason=why)
            return None
    node = read_node(layout.node_json(node_id))
    return seal_node(ring, evidence.evidence_request(ring, layout, node))


def _engineer_request(ring, layout, node: Node, recorded: dict, refused: list):
    """The seal request of a carried engineer session, or None (not that kind, or its
    writers may not have stopped: refused and listed)."""
    if not engineer.is_carried_engineer(node):
        return None
    if node.id not in recorded:
        why = engineer.not_sealable(layout, node.id)
        if why is not None:
            refused.append({"node": node.id, "reason": why})
            emit_event(layout.root, "carryover_refused", node=node.id, reason=why)
            return None
    return engineer.engineer_request(ring, layout, node)
