"""Promotion (docs/operations.md#final-selection): top nodes by seed-0 score get seeds 1 and 2; rank
by the 3-seed mean."""

from __future__ import annotations

from pathlib import Path
from statistics import fmean

from ..core.clock import load_ring
from ..core.jsonio import atomic_write_json, read_json
from ..core.layout import RingLayout
from ..core.ledger import emit_event
from .incumbent import incumbent_node
from .scores import PROMOTION_SEEDS, candidate_ids, node_mean, rank_key

__all__ = ["PROMOTION_SEEDS", "candidate_ids", "node_mean", "promote", "rank", "rank_key"]


def promote(ring_dir: str | Path) -> dict:
    ring = load_ring(ring_dir)
    layout = RingLayout(Path(ring.ring_dir))
    index = read_json(layout.nodes_index)
    direction = ring.task.direction
    scored, unscored = [], []
    # The chain's incumbent is what finalists are guarded against, never one of them.
    held = incumbent_node(ring, index)
    for node in candidate_ids(index):
        if node == held:
            continue
        s0 = node_mean(ring, layout, node, "s0")
        if s0["mean"] is None:
            unscored.append({"node": node, "per_view": s0["per_view"]})
        else:
            scored.append({"node": node, "score": s0["mean"], "per_view": s0["per_view"]})
    scored.sort(key=rank_key(direction))
    k = ring.config.promote_top_k
    promotion = {
        "direction": direction,
        "ranked_by_seed0": scored,
        "unscored": unscored,
        "promoted": [row["node"] for row in scored[:k]],
        "incumbent": held,
    }
    atomic_write_json(layout.promotion, promotion)
    emit_event(layout.root, "promoted", nodes=promotion["promoted"])
    return promotion


def rank(ring_dir: str | Path) -> dict:
    """The 3-seed ranking of promoted nodes; a node missing a seed is not a finalist."""
    ring = load_ring(ring_dir)
    layout = RingLayout(Path(ring.ring_dir))
    promotion = read_json(layout.promotion)
    rows, incomplete = [], []
    for node in promotion["promoted"]:
        seeds = {v: node_mean(ring, layout, node, v)["mean"] for v in PROMOTION_SEEDS}
        if any(v is None for v in seeds.values()):
            incomplete.append({"node": node, "seeds": seeds})
            continue
        rows.append({"node": node, "score": fmean(seeds.values()), "seeds": seeds})
    rows.sort(key=rank_key(promotion["direction"]))
    # Fixes k before any guard run (docs/operations.md#the-clock).
    from .timekeeper import settle_final_k

    k = settle_final_k(ring.ring_dir, [row["node"] for row in rows])
    ranking = {
        "direction": promotion["direction"],
        "ranked": rows,
        "incomplete": incomplete,
        "finalists": [row["node"] for row in rows[:k]],
        "note": "3-seed means are conditional on the frozen weights and the current data; "
        "they say nothing about whether retraining the method is stably better.",
    }
    atomic_write_json(layout.ranking, ranking)
    return ranking
