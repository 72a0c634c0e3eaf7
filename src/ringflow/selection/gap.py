"""The selection gap (docs/operations.md#final-selection): one definition, shared by FINAL.json and
the report."""

from __future__ import annotations


def selection_gap(chosen: str | None, scores: dict[str, float | None], direction: str) -> dict:
    """The chosen program's final-view score against the best final-view score among the
    programs that ran there (finalists and the baseline).

    `gap` is how much better the best of them scored than the choice, in the task's
    direction (0 when the choice is the best of those compared; None when the choice has
    no final-view score). `compared` lists who ran there: the gap says nothing about
    programs that did not.
    """
    ran = {node: value for node, value in scores.items() if value is not None}
    sign = 1.0 if direction == "maximize" else -1.0
    best = min(ran, key=lambda n: (-sign * ran[n], n)) if ran else None
    chosen_score = ran.get(chosen) if chosen else None
    gap = None
    if best is not None and chosen_score is not None:
        gap = max(0.0, sign * (ran[best] - chosen_score))
    return {
        "chosen": chosen,
        "chosen_score": chosen_score,
        "best": best,
        "best_score": None if best is None else ran[best],
        "gap": gap,
        "compared": sorted(ran),
        "not_run": sorted(n for n, v in scores.items() if v is None),
        "direction": direction,
    }
