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


def check_resampling(report, ring: dict, node: str, view: str) -> None:
    """`ringflow check`: score one scored output of `node` on `view` under other seeds and
    fail a scorer whose score does not move, unless the task declares mode (c)."""
    from pathlib import Path

    from .ring.layout import RingLayout
    from .scoring import _evaluate, read_score, scorer_mode

    mode = scorer_mode(ring["task"])
    report.head("scorer mode (does the guard see which rows are in the guard view?):")
    if mode == "fixed":
        report.warn(
            "scorer_resamples: false: one number per output; the guard will cover the "
            "programs' own noise only, not which rows happen to be in the guard view"
        )
        return
    if mode == "rows":
        report.ok("scorer_rows: true: ringflow draws the row resamples from the guard seeds")
        return
    layout = RingLayout(Path(ring["ring_dir"]))
    first = read_score(layout, node, view, "s0") or {}
    if not first.get("valid") or first.get("score") is None:
        report.warn("no valid output to score under two seeds: the resampling is not checked")
        return
    exec_dir = layout.exec_dir(node, view, "s0")
    problem = resample_verdict(
        lambda seed: _evaluate(ring, exec_dir, view, "s0", seed), 0, first["score"]
    )
    if problem is None:
        report.ok("the score changes with --seed: the scorer resamples its rows")
    else:
        report.fail(problem)


def report_power(report, ring: dict, index: dict) -> None:
    """`ringflow check --baseline DIR`: the guard's power, estimated before the ring."""
    from .errors import RingflowError
    from .selection.power import probe_baseline

    report.head("power of the guard (the baseline on the guard view, probe seeds):")
    base = index.get("baseline")
    ready = {n["id"] for n in index["nodes"] if n["status"] == "ready"}
    if base is None:
        report.warn("skipped: no baseline given (--baseline DIR)")
        return
    if base not in ready:
        report.fail(f"the baseline {base} was rejected at import")
        return
    try:
        power = probe_baseline(ring, base)
    except (RingflowError, ValueError) as exc:
        report.fail(f"no estimate: {exc}")
        return
    report.ok(
        f"smallest advantage the guard could detect: {power['detectable']:.4g} "
        f"({len(ring['guard_seeds'])} guard seeds, alpha' {power['alpha_prime']:.3g}; row SD "
        f"{power['row_sd']:.3g}, seed SD {power['seed_sd']:.3g}); raise guard.seeds or add "
        "guard rows to detect less"
    )
