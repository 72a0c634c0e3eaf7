"""The view-blind check's statistics (docs/guard.md#view-blind-check): a first screen on
two disguised copies, and for programs whose output varies a prediction interval of more
disguised runs that an honest program leaves with a known, small probability.

Pure functions of scores, so that the rates they give can be measured by simulation.
"""

from __future__ import annotations

import math
from functools import lru_cache
from statistics import fmean, stdev

# Scores closer than this, relative to their scale, are the same score (float summation
# order after a reordering moves a score by ~1e-8).
ARITH_REL = 1e-6
ARITH_ABS = 1e-12
# The first screen allows a program that trains (or a task that reorders rows) this many
# times the difference between its two disguised runs, its own retraining noise. It is a
# screen only: an honest retrainer exceeds it about 12% of the time, and is then judged
# by the prediction interval.
RETRAIN_FACTOR = 4.0
# The prediction interval's two-sided level: under normal noise an honest program's fresh
# real run lies outside it with probability 1 - PI_LEVEL = 0.5% (exactly: the runs are
# exchangeable), whatever the screen did before.
PI_LEVEL = 0.995


def arithmetic_noise(*scores: float) -> float:
    return ARITH_REL * max(abs(s) for s in scores) + ARITH_ABS


def screen(real: float, first: float, second: float, retrains: bool) -> dict:
    """The first screen: does the real score match a disguised one within arithmetic noise
    (plus RETRAIN_FACTOR times the disguised runs' own difference for a program that
    retrains)? `varies` says whether the program's output moves between runs at all."""
    arithmetic = arithmetic_noise(real, first, second)
    noise = abs(first - second)
    allowed = arithmetic + (RETRAIN_FACTOR * noise if retrains else 0.0)
    differences = [abs(real - first), abs(real - second)]
    return {
        "arithmetic_noise": arithmetic,
        "retrain_noise": noise if retrains else 0.0,
        "allowed": allowed,
        "differences": differences,
        "flagged": min(differences) > allowed,
        "varies": noise > arithmetic,
    }


@lru_cache(maxsize=64)
def t_quantile(p: float, df: int) -> float:
    from scipy.stats import t

    return float(t.ppf(p, df))


def prediction_interval(disguised: list[float], level: float = PI_LEVEL) -> tuple[float, float]:
    """The Student-t prediction interval for one more run exchangeable with `disguised`:
    mean +- t(1 - (1 - level) / 2, n - 1) * sd * sqrt(1 + 1 / n)."""
    n = len(disguised)
    if n < 2:
        raise ValueError(f"a prediction interval needs at least 2 disguised runs, got {n}")
    centre, sd = fmean(disguised), stdev(disguised)
    half = t_quantile(1 - (1 - level) / 2, n - 1) * sd * math.sqrt(1 + 1 / n)
    half += arithmetic_noise(*disguised)
    return centre - half, centre + half


def confirm(real_fresh: float, disguised: list[float], level: float = PI_LEVEL) -> dict:
    """The second stage: the real view's fresh run inside the disguised runs' interval?"""
    low, high = prediction_interval(disguised, level)
    return {
        "real_fresh": real_fresh,
        "disguised": list(disguised),
        "interval": [low, high],
        "level": level,
        "outside": not low <= real_fresh <= high,
    }
