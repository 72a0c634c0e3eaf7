"""The parent lottery: rank-weighted, so only the order of scores matters (negative scores,
minimised losses and outliers all work the same way).

Scored nodes are ranked best first under the task's direction. Of k nodes, rank r
(1 = best) holds k - r + 1 tickets: with 3 nodes the best is drawn with probability 3/6,
the second 2/6, the third 1/6. Every draw is independent (a good parent may be drawn for
several new nodes of one generation). The random stream is seeded by the ring and the
generation, so a resumed ring draws the same parents.
"""

from __future__ import annotations

import random


def ranked(scores: dict[str, float], direction: str) -> list[str]:
    """Node ids best first; ties broken by node id."""
    sign = -1.0 if direction == "maximize" else 1.0
    return sorted(scores, key=lambda node: (sign * scores[node], node))


def tickets(count: int) -> list[int]:
    """Tickets per rank, best first: k, k-1, ..., 1."""
    return list(range(count, 0, -1))


def draw_parents(
    scores: dict[str, float], direction: str, draws: int, rng: random.Random
) -> list[str]:
    """`draws` parents drawn with replacement, rank-weighted; [] when nothing is scored."""
    order = ranked(scores, direction)
    if not order:
        return []
    return rng.choices(order, weights=tickets(len(order)), k=draws)


def generation_rng(ring_id: str, generation: int) -> random.Random:
    return random.Random(f"ringflow-search/{ring_id}/{generation}")
