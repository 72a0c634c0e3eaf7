"""Guard statistics (SPEC 10): paired differences, a one-sided Student-t LCB, the verdict.

The Student-t quantile is computed here so that the runtime needs no scipy. The
CDF comes from the regularized incomplete beta function (Lentz's continued
fraction), and the quantile from a Newton iteration kept inside a bisection
bracket. Both tails and the centre are each evaluated in the form that keeps
full relative precision, so the quantile is good to ~1e-13 relative over
df 1..1000 and p in [1e-6, 1 - 1e-6].
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from statistics import NormalDist

MAXIMIZE = "maximize"
MINIMIZE = "minimize"
DIRECTIONS = (MAXIMIZE, MINIMIZE)

_CF_EPS = 1e-16
_CF_TINY = 1e-300
_CF_MAX_ITER = 20_000


def _check_df(df: int) -> None:
    if isinstance(df, bool) or not isinstance(df, int) or df < 1:
        raise ValueError(f"Student-t degrees of freedom must be an integer >= 1, got {df!r}")


def _beta_cf(a: float, b: float, x: float) -> float:
    """Continued fraction of I_x(a, b) (modified Lentz); converges fast for x < (a+1)/(a+b+2)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = 1.0
    d = 1.0 - qab * x / qap
    d = _CF_TINY if abs(d) < _CF_TINY else d
    d = 1.0 / d
    h = d
    for m in range(1, _CF_MAX_ITER + 1):
        m2 = 2 * m
        # even step
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = _CF_TINY if abs(d) < _CF_TINY else d
        c = 1.0 + aa / c
        c = _CF_TINY if abs(c) < _CF_TINY else c
        d = 1.0 / d
        h *= d * c
        # odd step
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = _CF_TINY if abs(d) < _CF_TINY else d
        c = 1.0 + aa / c
        c = _CF_TINY if abs(c) < _CF_TINY else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _CF_EPS:
            return h
    raise ArithmeticError(f"incomplete beta continued fraction did not converge (a={a}, b={b})")


def _betainc(a: float, b: float, x: float, y: float, log_beta: float) -> float:
    """Regularized incomplete beta I_x(a, b), with y = 1 - x given exactly by the caller.

    Passing y separately avoids the cancellation of computing 1 - x near x = 1.
    """
    if x <= 0.0:
        return 0.0
    if y <= 0.0:
        return 1.0
    log_front = a * math.log(x) + b * math.log(y) - log_beta
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_cf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_cf(b, a, y) / b


@lru_cache(maxsize=2048)
def _log_beta_half(df: int) -> float:
    """log B(df/2, 1/2) = log(sqrt(pi) * G(df/2) / G((df+1)/2)), exactly recursive for integers.

    G(k/2)/G((k+1)/2) obeys r(k+2) = r(k) * k/(k+1), so no large lgamma values cancel.
    """
    ratio = math.sqrt(math.pi) if df % 2 else 2.0 / math.sqrt(math.pi)
    for k in range(2 - df % 2, df, 2):
        ratio *= k / (k + 1)
    return math.log(math.sqrt(math.pi) * ratio)


def _upper_tail(t: float, df: int) -> float:
    """P(T > t) for t >= 0: 0.5 * I_{df/(df+t^2)}(df/2, 1/2), precise for large t."""
    t2 = t * t
    x = df / (df + t2)
    y = t2 / (df + t2)
    return 0.5 * _betainc(df / 2.0, 0.5, x, y, _log_beta_half(df))


def _central(t: float, df: int) -> float:
    """P(|T| < t) for t >= 0: I_{t^2/(df+t^2)}(1/2, df/2), precise for small t."""
    t2 = t * t
    y = t2 / (df + t2)
    x = df / (df + t2)
    return _betainc(0.5, df / 2.0, y, x, _log_beta_half(df))


def _pdf(t: float, df: int) -> float:
    log_pdf = -(df + 1) / 2.0 * math.log1p(t * t / df) - 0.5 * math.log(df) - _log_beta_half(df)
    return math.exp(log_pdf)


def student_t_cdf(t: float, df: int) -> float:
    """P(T <= t) for Student's t with df degrees of freedom."""
    _check_df(df)
    if math.isnan(t):
        raise ValueError("Student-t CDF of NaN")
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    tail = _upper_tail(abs(t), df) if abs(t) > 1.0 else 0.5 - 0.5 * _central(abs(t), df)
    return 1.0 - tail if t >= 0 else tail


def _closed_form_quantile(tail: float, df: int) -> float | None:
    """Upper quantile t with P(T > t) = tail, tail in (0, 0.5], for df 1 and 2."""
    if df == 1:
        # Cauchy: t = cot(pi * tail); 0.5 - tail is exact for tail in [0.25, 0.5].
        if tail < 0.25:
            return 1.0 / math.tan(math.pi * tail)
        return math.tan(math.pi * (0.5 - tail))
    if df == 2:
        return (1.0 - 2.0 * tail) / math.sqrt(2.0 * tail * (1.0 - tail))
    return None


def _initial_guess(tail: float, df: int) -> float:
    """Cornish-Fisher style expansion around the normal quantile (Abramowitz-Stegun 26.7.5)."""
    z = NormalDist().inv_cdf(1.0 - tail) if tail < 0.5 else 0.0
    z2 = z * z
    g1 = (z2 + 1.0) * z / 4.0
    g2 = ((5.0 * z2 + 16.0) * z2 + 3.0) * z / 96.0
    return z + g1 / df + g2 / df**2


def _upper_quantile(tail: float, df: int) -> float:
    """The t >= 0 with P(T > t) = tail, for tail in (0, 0.5]."""
    if tail == 0.5:
        return 0.0
    exact = _closed_form_quantile(tail, df)
    if exact is not None:
        return exact
    # Solve in the better-conditioned form: the tail itself for small tails, the central
    # probability 1 - 2*tail (exact in floating point here) otherwise.
    if tail < 0.25:
        target = tail

        def residual(t: float) -> float:
            return _upper_tail(t, df) - target

        def slope(t: float) -> float:
            return -_pdf(t, df)
    else:
        target = 1.0 - 2.0 * tail

        def residual(t: float) -> float:
            return target - _central(t, df)

        def slope(t: float) -> float:
            return -2.0 * _pdf(t, df)

    # residual is decreasing in t: positive left of the root, negative right of it.
    lo, hi = 0.0, 1.0
    while residual(hi) > 0.0:
        lo, hi = hi, hi * 2.0
        if hi > 1e300:
            raise ArithmeticError(f"Student-t quantile bracket failed (tail={tail}, df={df})")
    t = min(max(_initial_guess(tail, df), lo), hi)
    for _ in range(500):
        r = residual(t)
        if r == 0.0:
            return t
        if r > 0.0:
            lo = t
        else:
            hi = t
        step = r / slope(t)
        candidate = t - step
        if not (lo < candidate < hi):
            candidate = 0.5 * (lo + hi)
            step = t - candidate
        t = candidate
        if abs(step) <= 2e-16 * t or hi - lo <= 4e-16 * hi:
            return t
    raise ArithmeticError(f"Student-t quantile did not converge (tail={tail}, df={df})")


def student_t_ppf(p: float, df: int) -> float:
    """Student-t quantile: the t with P(T <= t) = p (no scipy; see the module docstring)."""
    _check_df(df)
    if not 0.0 < p < 1.0:
        raise ValueError(f"Student-t quantile needs 0 < p < 1, got {p!r}")
    return _cached_ppf(float(p), int(df))


@lru_cache(maxsize=4096)
def _cached_ppf(p: float, df: int) -> float:
    # Guards ask for the same (1 - alpha', n - 1) over and over; validation happens first
    # so that a cache hit can never let a bad argument (True == 1) through.
    if p > 0.5:
        return _upper_quantile(1.0 - p, df)  # 1 - p is exact for p in (0.5, 1)
    return -_upper_quantile(p, df)


def _check_direction(direction: str) -> None:
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")


def _check_alpha(alpha: float) -> None:
    if not (isinstance(alpha, int | float) and 0.0 < alpha < 1.0):
        raise ValueError(f"alpha must lie strictly between 0 and 1, got {alpha!r}")


def paired_lcb(
    candidate: Sequence[float], baseline: Sequence[float], *, alpha: float, direction: str
) -> dict:
    """One-sided Student-t lower confidence bound on the candidate's per-seed advantage.

    Differences are candidate minus baseline, negated for "minimize", so a positive
    difference always means the candidate did better on that seed. LCB = mean -
    t(1-alpha, n-1) * sd / sqrt(n); with zero spread the LCB is the mean; with fewer than
    two seeds there is no LCB and "reason" says so. The bound is conditional on the frozen
    weights and the current data (SPEC 5): it says nothing about retraining.
    """
    _check_alpha(alpha)
    _check_direction(direction)
    if len(candidate) != len(baseline):
        raise ValueError(
            f"paired guard needs one baseline score per candidate score, "
            f"got {len(candidate)} candidate and {len(baseline)} baseline scores"
        )
    sign = -1.0 if direction == MINIMIZE else 1.0
    differences = []
    for index, (cand, base) in enumerate(zip(candidate, baseline, strict=True)):
        cand, base = float(cand), float(base)
        if not (math.isfinite(cand) and math.isfinite(base)):
            raise ValueError(
                f"guard score at position {index} is not finite "
                f"(candidate {cand!r}, baseline {base!r})"
            )
        differences.append(sign * (cand - base))
    n = len(differences)
    stats: dict = {
        "differences": differences,
        "n": n,
        "mean": None,
        "sd": None,
        "t": None,
        "lcb": None,
        "alpha": alpha,
        "reason": None,
    }
    if n == 0:
        stats["reason"] = "no paired seeds: no LCB"
        return stats
    if all(d == differences[0] for d in differences):
        # Exact zero spread: the summed mean could round away from the common value.
        mean, sd = differences[0], 0.0
    else:
        mean = math.fsum(differences) / n
        sd = math.sqrt(math.fsum((d - mean) ** 2 for d in differences) / (n - 1)) if n > 1 else None
    stats["mean"] = mean
    if n < 2:
        stats["reason"] = "one paired seed: no spread estimate, no LCB"
        return stats
    t = student_t_ppf(1.0 - alpha, n - 1)
    stats["sd"] = sd
    stats["t"] = t
    stats["lcb"] = mean if sd == 0.0 else mean - t * sd / math.sqrt(n)
    return stats


def guard_verdict(stats: Mapping, *, margin: float, complete: bool) -> tuple[bool, str]:
    """Replace the baseline only if every guard job finished and the LCB is above margin."""
    if not math.isfinite(margin):
        raise ValueError(f"guard margin must be a finite number, got {margin!r}")
    if not complete:
        return False, "incomplete guard: baseline kept"
    lcb = stats.get("lcb")
    if lcb is None:
        why = stats.get("reason") or "no LCB"
        return False, f"{why}: baseline kept"
    if lcb > margin:
        return True, f"LCB {lcb:.4g} > margin {margin:g}: candidate replaces baseline"
    return False, f"LCB {lcb:.4g} <= margin {margin:g}: baseline kept"


def per_seed_side_scores(
    scores: Mapping[int, Mapping[str, float | None]], views: Iterable[str]
) -> dict[int, float | None]:
    """One side's score per seed: its mean over the search views; None if any view is missing."""
    views = list(views)
    if not views:
        raise ValueError("per-seed guard scores need at least one search view")
    result: dict[int, float | None] = {}
    for seed, by_view in scores.items():
        values = [by_view.get(view) for view in views]
        if any(value is None for value in values):
            result[seed] = None
        else:
            result[seed] = math.fsum(float(v) for v in values) / len(values)
    return result


def alpha_prime(alpha: float, final_top_k: int) -> float:
    """Per-finalist level alpha / final_top_k: P(any false replacement) stays <= alpha."""
    _check_alpha(alpha)
    if isinstance(final_top_k, bool) or not isinstance(final_top_k, int) or final_top_k < 1:
        raise ValueError(f"final_top_k must be an integer >= 1, got {final_top_k!r}")
    return alpha / final_top_k


# Relative to the scores' scale, replicates closer than this are "equal": arithmetic noise.
NO_SPREAD_REL = 1e-9


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
    """Paired bootstrap lower confidence bound on the candidate's advantage (SPEC 10).

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
    scale = max(abs(v) for row in (*cand, *base) for v in row) or 1.0
    spread = ordered[-1] - ordered[0]
    stats: dict = {
        "method": "paired bootstrap",
        "replicates": count,
        "views": views,
        "seeds": seeds,
        "alpha": alpha,
        "quantile_index": index,
        "mean": math.fsum(replicates) / count,
        "min": ordered[0],
        "max": ordered[-1],
        "spread": spread,
        "lcb": None,
        "reason": None,
    }
    if spread <= NO_SPREAD_REL * scale:
        stats["reason"] = (
            f"the bootstrap distribution of the paired difference has no spread (all {count} "
            f"replicates are {ordered[0]:.6g}): the scorer ignores --seed and the programs "
            "are deterministic, so the guard cannot bound the difference"
        )
        return stats
    if alpha * count < 1:
        stats["reason"] = (
            f"{count} bootstrap resamples cannot give a {alpha:.3g}-quantile; raise guard.bootstrap"
        )
        return stats
    stats["lcb"] = ordered[index]
    return stats
