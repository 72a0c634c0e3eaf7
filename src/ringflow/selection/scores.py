"""A node's scores as selection reads them: the mean over the search views of one variant,
a comparable imported score standing in for this ring's own run, and the order of nodes
under the task's direction. Read by promotion, the timekeeper, reports and the search."""

from __future__ import annotations

from statistics import fmean

from ..carryover.scores import imported_score
from ..core import statuses
from ..core.layout import RingLayout
from ..core.state import Ring
from ..scoring import read_score, usable

PROMOTION_SEEDS = ("s0", "s1", "s2")


def node_mean(ring: Ring, layout: RingLayout, node: str, variant: str) -> dict:
    """A node's score for one variant: its mean over the search views (None if any is missing)."""
    direction = ring.task.direction
    per_view = {
        view: usable(_score_or_imported(ring, layout, node, view, variant), direction)
        for view in ring.search_views
    }
    values = list(per_view.values())
    mean = None if any(v is None for v in values) else fmean(values)
    return {"per_view": per_view, "mean": mean}


def _score_or_imported(ring: Ring, layout: RingLayout, node: str, view: str, variant: str):
    """This ring's score of the execution; without one, a comparable imported score
    (docs/operations.md#chains: made under the same search_hash) stands in for it."""
    own = read_score(layout, node, view, variant)
    if own is not None:
        return own
    return imported_score(layout, node, view, variant, ring.search_hash)


def rank_key(direction: str):
    """Best first under the task's direction; ties broken by node id."""
    sign = -1.0 if direction == "maximize" else 1.0
    return lambda row: (sign * row["score"], row["node"])


def candidate_ids(index: dict) -> list[str]:
    return [
        n["id"]
        for n in index["nodes"]
        if n["role"] == "candidate" and n["status"] == statuses.READY
    ]
