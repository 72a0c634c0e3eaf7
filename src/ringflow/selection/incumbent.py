"""The chain's incumbent (docs/guard.md#the-incumbent): what a ring's finalists must beat.

A chain's first ring guards its finalists against the configured baseline. A ring that
continues another guards them against the incumbent, the program its parent's final/
holds (with its code, weights and guard record), so that a ring never deploys a program
the chain has already beaten. `guard.against: baseline` brings back the baseline on
purpose. The incumbent is found in this ring by its tree hash: the import took it over
with the parent's scored work (scored.py), so it runs here under this ring's fresh guard
seeds like any node.

Everything here is a pure function of the ring's lock, its imported nodes and the
parent's finished final/: the promotion, the seat, the verdicts, the decision, the
timekeeper and the workflow all read the same answer.
"""

from __future__ import annotations

from pathlib import Path

from ..core.clock import load_ring
from ..core.errors import InputError
from ..core.jsonio import read_json
from ..core.layout import RingLayout
from ..core.node_state import read_node
from ..core.state import Ring
from ..core.statuses import READY
from .order import usable_baseline

INCUMBENT, BASELINE = "incumbent", "baseline"


def against(ring: Ring) -> str:
    """What the configuration says finalists are guarded against."""
    return ring.config.guard.against or INCUMBENT


def parent_dir(ring: Ring) -> Path | None:
    if not ring.continue_from:
        return None
    return (Path(ring.ring_dir) / ring.continue_from).resolve()


def parent_choice(ring: Ring) -> dict | None:
    """What the parent ring's final/ holds: the node, its tree, the ring that chose it and
    how ("candidate": the parent chose it; "incumbent": an earlier ring did; "baseline");
    None for a first ring or a parent that wrote no final/."""
    parent = parent_dir(ring)
    if parent is None:
        return None
    layout = RingLayout(parent)
    final = layout.final_dir / "FINAL.json"
    try:
        record = read_json(final)
        parent_ring = load_ring(parent)
        tree = read_node(layout.node_json(record["chosen"])).tree_hash
    except (InputError, KeyError, OSError, TypeError):
        return None
    decision = record.get("decision")
    earlier = record.get("incumbent") or {}
    if decision == "candidate":
        chosen_in = parent_ring.ring_id
    elif decision == INCUMBENT:
        chosen_in = earlier.get("chosen_in")
    else:
        chosen_in = None
    return {
        "ring": parent_ring.ring_id,
        "ring_dir": str(parent),
        "node": record["chosen"],
        "tree_hash": tree,
        "decision": decision,
        "chosen_in": chosen_in,
        "is_baseline": decision == BASELINE or record["chosen"] == record.get("baseline"),
    }


def _ready_node_with_tree(ring: Ring, index: dict, tree: str | None) -> str | None:
    if not tree:
        return None
    layout = RingLayout(Path(ring.ring_dir))
    for entry in index["nodes"]:
        if entry["status"] != READY:
            continue
        try:
            node = read_node(layout.node_json(entry["id"]))
        except (InputError, OSError):
            continue
        if node.tree_hash == tree:
            return entry["id"]
    return None


def reference(ring: Ring, index: dict) -> dict:
    """The side every finalist of this ring is guarded against, and why.

    `node` is that side (None when there is no usable baseline: the guard is refused or
    disabled, as before), `role` is "incumbent" or "baseline", `incumbent` is the parent's
    choice (None for a first ring)."""
    base = usable_baseline(index)
    choice = parent_choice(ring)
    wanted = against(ring)
    out = {"against": wanted, "node": base, "role": BASELINE, "baseline": base,
           "incumbent": choice, "warning": None}  # fmt: skip
    if base is None:
        out["reason"] = "no usable baseline"
        return out
    if choice is None:
        out["reason"] = "the chain's first ring: the incumbent is the baseline"
        return out
    if wanted == BASELINE:
        out["reason"] = "guard.against: baseline: finalists are guarded against the baseline"
        if not choice["is_baseline"]:
            out["warning"] = (
                f"guard.against: baseline: this ring does not keep the chain's incumbent "
                f"({choice['node']} in ring {choice['ring']}'s final/); a finalist that beats "
                "the baseline but not it replaces it"
            )
        return out
    if choice["is_baseline"]:
        out["reason"] = f"ring {choice['ring']} kept the baseline: the incumbent is the baseline"
        return out
    node = _ready_node_with_tree(ring, index, choice["tree_hash"])
    if node is None or node == base:
        out["reason"] = (
            f"the incumbent {choice['node']} of ring {choice['ring']} is not a ready node "
            "of this ring (its program was not imported): guarded against the baseline"
        )
        out["warning"] = out["reason"]
        return out
    out.update(node=node, role=INCUMBENT, reason=(
        f"the chain's incumbent: {node}, in ring {choice['ring']}'s final/ (chosen in ring "
        f"{choice['chosen_in'] or choice['ring']})"))  # fmt: skip
    return out


def incumbent_node(ring: Ring, index: dict) -> str | None:
    """The incumbent when it is not the baseline (it is then no finalist of its own)."""
    ref = reference(ring, index)
    return ref["node"] if ref["role"] == INCUMBENT else None


def history(ring_dir: str | Path) -> list[dict]:
    """The chain's incumbent ring by ring, first ring first: what each ring's final/
    holds, what it was guarded against and by how much it beat that on the final view.
    A ring without a final/ yet has `decision` None."""
    from ..core.seeds import chain_rings

    rows = []
    for lock in reversed(chain_rings(Path(ring_dir))):
        layout = lock.layout
        record = {}
        for path in (layout.final_dir / "FINAL.json", layout.decision):
            try:
                record = read_json(path)
                break
            except (InputError, OSError):
                continue
        gain = record.get("improvement_over_reference") or record.get("improvement") or {}
        rows.append({
            "ring": lock.ring_id,
            "decision": record.get("decision"),
            "holds": record.get("chosen"),
            "against": record.get("guard_against") or (BASELINE if record else None),
            "reference": record.get("reference", record.get("baseline")),
            "chosen_in": ((record.get("incumbent") or {}).get("chosen_in")
                          if record.get("decision") == INCUMBENT else lock.ring_id),
            "chosen_as": chosen_as(record.get("incumbent") or {}),
            "difference": gain.get("difference"),
            "interval": gain.get("interval"),
            "view": gain.get("view"),
            "complete": bool(record.get("complete")),
            # A ring stopped before its decision never makes one (docs/recovery.md).
            "stopped": not record and layout.stopped.exists(),
        })  # fmt: skip
    return rows


def chosen_as(incumbent: dict) -> str | None:
    """The incumbent's node id in the ring that chose it, where that ring (the parent)
    numbered it otherwise: node ids are each ring's own."""
    node, parent_node = incumbent.get("node"), incumbent.get("parent_node")
    if incumbent.get("parent_ring") != incumbent.get("chosen_in") or parent_node == node:
        return None
    return parent_node
