"""Does the scorer resample? The check `ringflow check` and a ring's first baseline score
make (docs/guard.md#scorer-modes).

A scorer that ignores `--seed` scores every guard run on the same rows: the guard's bound
then sees only the programs' own noise, never which rows happen to be in the guard view,
and with equally good programs it replaces the baseline about half the time. So a scorer
must resample by its seed (a), give one value per row (b), or declare that it gives one
number per output (c).
"""

from __future__ import annotations

from collections.abc import Callable

# Other seeds tried before concluding that the scorer ignores --seed: a resampled metric on
# few rows can give the same value under two seeds by chance, hardly under four.
OTHER_SEEDS = (7919, 104_729, 1_299_709)

HOW_TO_DECLARE = (
    "Declare in task.yaml what the scorer does: "
    "(a) let `--seed N` draw a full-size bootstrap resample of the rows it scores (the same "
    "seed draws the same rows; the demo's scorer.py does this, and `scorer_bootstrap: true` "
    "lets one call return many resamples); or "
    '(b) `scorer_rows: true` and write `"rows": [...]`, one value per labelled row in the '
    "labels' order (the metric is their mean), and ringflow draws the resamples; or, only "
    "when the metric has no rows to resample, "
    "(c) `scorer_resamples: false` (the guard then covers the programs' own noise only)."
)


def seed_blind_message(score: float, seeds: list[int]) -> str:
    shown = ", ".join(str(s) for s in seeds)
    return (
        f"the scorer gave the same score ({score:.6g}) for one output under seeds {shown}: "
        "it ignores --seed, so the guard could not see which rows happen to be in the guard "
        f"view and would replace an equally good baseline about half the time. {HOW_TO_DECLARE}"
    )


def resample_verdict(
    score_with: Callable[[int], dict], first_seed: int, first_score: float
) -> str | None:
    """None when the scorer's score moves with the seed (or cannot be judged: a later call
    gave no valid score, which the ring reports on its own); else why it is refused.

    `score_with(seed)` scores the same output under another seed and returns its record.
    """
    seeds = [first_seed]
    for offset in OTHER_SEEDS:
        seed = first_seed + offset
        record = score_with(seed)
        if not record.get("valid") or record.get("score") is None:
            return None
        seeds.append(seed)
        if record["score"] != first_score:
            return None
    return seed_blind_message(first_score, seeds)
