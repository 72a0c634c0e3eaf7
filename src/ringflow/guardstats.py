"""Guard statistics (docs/operations.md#final-selection): the paired bootstrap lower bound, the
verdict, alpha'.

The bound is a paired bootstrap over the guard rows and the guard seeds' runs, never a
Student-t bound over seeds: re-drawing rows of one fixed guard set with a t-bound
measures subsampling noise only, and in a population-null model it replaced an equally
good baseline about a third of the time.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence

MAXIMIZE = "maximize"
MINIMIZE = "minimize"
DIRECTIONS = (MAXIMIZE, MINIMIZE)


def _check_direction(direction: str) -> None:
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")


def _check_alpha(alpha: float) -> None:
    if not (isinstance(alpha, int | float) and 0.0 < alpha < 1.0):
        raise ValueError(f"alpha must lie strictly between 0 and 1, got {alpha!r}")


def guard_verdict(
    stats: Mapping, *, margin: float, complete: bool, against: str = "baseline"
) -> tuple[bool, str]:
    """Replace the side guarded against (the baseline, or the chain's incumbent) only if
    every guard job finished and the LCB is above margin."""
    if not math.isfinite(margin):
        raise ValueError(f"guard margin must be a finite number, got {margin!r}")
    if not complete:
        return False, f"incomplete guard: {against} kept"
    lcb = stats.get("lcb")
    if lcb is None:
        why = stats.get("reason") or "no LCB"
        return False, f"{why}: {against} kept"
    if lcb > margin:
        return True, f"LCB {lcb:.4g} > margin {margin:g}: candidate replaces {against}"
    return False, f"LCB {lcb:.4g} <= margin {margin:g}: {against} kept"


def per_seed_side_scores(
    scores: Mapping[int, Mapping[str, float | None]], views: Iterable[str]
) -> dict[int, float | None]:
    """One side's score per seed: its mean over the guard views; None if any view is missing."""
    views = list(views)
    if not views:
        raise ValueError("per-seed guard scores need at least one view")
    result: dict[int, float | None] = {}
    for seed, by_view in scores.items():
        values = [by_view.get(view) for view in views]
        if any(value is None for value in values):
            result[seed] = None
        else:
            result[seed] = math.fsum(float(v) for v in values) / len(values)
    return result


def alpha_prime(alpha: float, final_top_k: int) -> float:
    """Per-finalist level alpha / the number of finalists eligible at ranking (at most
    final_top_k): P(any false replacement) stays <= alpha."""
    _check_alpha(alpha)
    if isinstance(final_top_k, bool) or not isinstance(final_top_k, int) or final_top_k < 1:
        raise ValueError(f"final_top_k must be an integer >= 1, got {final_top_k!r}")
    return alpha / final_top_k


# Replicates whose spread is below this fraction of the mean paired difference are "equal":
# arithmetic noise of the mean itself. Judged against the difference, never the scores'
# scale: at scores near 1e7 a consistent advantage of 5 with real spread still has a bound.
NO_SPREAD_REL = 1e-9
# Two scores this close are the same score: a scorer that sums the same rows in another
# order differs in the last bits (about rows x 2.2e-16 of the score), never by more.
SAME_SCORE_REL = 1e-12


def min_bootstrap(final_top_k: int, alpha: float) -> int:
    """The fewest bootstrap resamples that can give the alpha/final_top_k quantile."""
    return math.ceil(final_top_k / alpha - 1e-9)


def _bootstrap_table(side: Mapping, views: list[str], seeds: list[int], count: int, what: str):
    table = []
    for view in views:
        for seed in seeds:
            values = side.get(view, {}).get(seed)
            if values is None or len(values) != count:
                raise ValueError(
                    f"{what}: {count} bootstrap scores needed for view {view!r} seed {seed}, "
                    f"got {None if values is None else len(values)}"
                )
            table.append([float(v) for v in values])
    return table


def paired_bootstrap_lcb(
    candidate: Mapping[str, Mapping[int, Sequence[float]]],
    baseline: Mapping[str, Mapping[int, Sequence[float]]],
    *,
    alpha: float,
    direction: str,
    rng_seed: int | str = 0,
) -> dict:
    """Paired bootstrap lower confidence bound on the candidate's advantage
    (docs/operations.md#final-selection).

    `candidate[view][seed]` holds B scores of that guard run, one per bootstrap resample
    of the view's rows; resample b is the same rows for both sides. Replicate b resamples
    the guard seeds' runs too (n draws with replacement, the same for both sides) and takes
    the mean paired difference over the drawn seeds and every view, negated for
    "minimize". The LCB is the alpha-quantile of the B replicates (the ceil(alpha*B)-th
    smallest). A distribution without spread (a scorer that ignores the seed and
    deterministic programs) bounds nothing: no LCB, and "reason" says why.
    """
    _check_alpha(alpha)
    _check_direction(direction)
    views = sorted(candidate)
    if not views or sorted(baseline) != views:
        raise ValueError(
            f"paired bootstrap needs the same guard views on both sides, got "
            f"{sorted(candidate)} and {sorted(baseline)}"
        )
    seeds = sorted(candidate[views[0]])
    if not seeds:
        raise ValueError("paired bootstrap needs at least one guard seed")
    count = len(candidate[views[0]][seeds[0]])
    if count < 1:
        raise ValueError("paired bootstrap needs at least one bootstrap score per run")
    cand = _bootstrap_table(candidate, views, seeds, count, "candidate")
    base = _bootstrap_table(baseline, views, seeds, count, "baseline")
    sign = -1.0 if direction == MINIMIZE else 1.0
    for row in (*cand, *base):
        if not all(math.isfinite(v) for v in row):
            raise ValueError("guard bootstrap scores must be finite numbers")
    # diff[view-seed cell][b], the cells ordered view-major as in the tables.
    diff = [
        [sign * (c - b) for c, b in zip(cr, br, strict=True)]
        for cr, br in zip(cand, base, strict=True)
    ]
    n_seeds, n_views = len(seeds), len(views)
    rng = random.Random(f"paired-bootstrap/{rng_seed}")
    replicates = []
    for b in range(count):
        drawn = [rng.randrange(n_seeds) for _ in range(n_seeds)]
        total = math.fsum(diff[v * n_seeds + s][b] for v in range(n_views) for s in drawn)
        replicates.append(total / (n_views * n_seeds))
    ordered = sorted(replicates)
    index = max(0, math.ceil(alpha * count) - 1)
    spread = ordered[-1] - ordered[0]
    mean = math.fsum(replicates) / count
    stats: dict = {
        "method": "paired bootstrap",
        "replicates": count,
        "views": views,
        "seeds": seeds,
        "alpha": alpha,
        "quantile_index": index,
        "mean": mean,
        "min": ordered[0],
        "max": ordered[-1],
        "spread": spread,
        "lcb": None,
        "interval": None,
        "detectable": None,
        "reason": None,
    }
    pairs = (pair for rows in zip(cand, base, strict=True) for pair in zip(*rows, strict=True))
    if all(math.isclose(c, b, rel_tol=SAME_SCORE_REL, abs_tol=0.0) for c, b in pairs):
        # Not a seed-blind scorer: the two programs scored alike on every row resample of
        # every run, as a program that makes the other's predictions does (to the last
        # bits, where the scorer summed the rows in another order).
        stats["reason"] = (
            f"the paired difference has no spread: both programs scored the same on every "
            f"guard run and every one of its {count} resamples, as programs that make the "
            "same predictions do, so nothing shows the finalist better"
        )
        return stats
    if spread == 0 or spread <= NO_SPREAD_REL * abs(mean):
        stats["reason"] = (
            f"the bootstrap distribution of the paired difference has no spread (all {count} "
            f"replicates are {ordered[0]:.6g}): the scorer ignores --seed (or gives one number "
            "per output) and the programs are deterministic, so the guard cannot bound the "
            "difference"
        )
        return stats
    if alpha * count < 1:
        stats["reason"] = (
            f"{count} bootstrap resamples cannot give a {alpha:.3g}-quantile; raise guard.bootstrap"
        )
        return stats
    # The central 1 - 2 * alpha interval of the mean paired difference (reports use it).
    stats["interval"] = [ordered[index], ordered[min(count - 1, count - 1 - index)]]
    stats["lcb"] = ordered[index]
    # The smallest mean advantage this guard could have told from zero
    # (docs/operations.md#final-selection).
    stats["detectable"] = stats["mean"] - stats["lcb"]
    return stats
