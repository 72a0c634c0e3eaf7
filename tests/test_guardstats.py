"""Guard statistics: the scipy-free t quantile, the paired LCB, its error rates, the verdict."""

from __future__ import annotations

import math
from decimal import Decimal, getcontext

import numpy as np
import pytest
from scipy import stats

from ringflow.selection.guardstats import (
    alpha_prime,
    guard_verdict,
    paired_lcb,
    per_seed_side_scores,
    student_t_cdf,
    student_t_ppf,
)

PROBS = [1e-6, 1e-4, 0.001, 0.01, 0.025, 0.05, 0.1, 0.3, 0.49, 0.5, 0.51, 0.7, 0.9, 0.95]
PROBS += [0.975, 0.99, 0.999, 1 - 1e-4, 1 - 1e-6]
DFS = [*range(1, 61), 75, 100, 101, 250, 500, 999, 1000]


def test_t_quantile_matches_scipy_over_grid():
    worst = 0.0
    for df in DFS:
        for p in PROBS:
            ours = student_t_ppf(p, df)
            ref = float(stats.t.ppf(p, df))
            if ref == 0.0:
                assert ours == 0.0
                continue
            worst = max(worst, abs(ours - ref) / abs(ref))
    assert worst < 1e-9, worst


def test_t_cdf_matches_scipy_and_inverts_ppf():
    for df in (1, 2, 3, 4, 7, 30, 1000):
        for t in (-300.0, -5.0, -1.0, -0.3, 0.0, 1e-8, 0.2, 1.0, 1.5, 4.0, 80.0):
            # scipy's Cauchy CDF loses digits near 0; df 1 has an exact form
            ref = 0.5 + math.atan(t) / math.pi if df == 1 else float(stats.t.cdf(t, df))
            assert student_t_cdf(t, df) == pytest.approx(ref, rel=1e-11, abs=1e-300)
        for p in (1e-6, 0.2, 0.8, 1 - 1e-6):
            tail = min(p, 1 - p)
            back = student_t_cdf(student_t_ppf(p, df), df)
            assert abs(back - p) <= 1e-12 * tail


def test_t_quantile_near_exact_for_df4_closed_form():
    # For df = 4 the CDF has a closed form; evaluate it in 60-digit decimals at our quantile.
    getcontext().prec = 60

    def cdf4(t: float) -> Decimal:
        t = Decimal(t)
        s = 1 + t * t / 4
        return Decimal(1) / 2 + Decimal(3) / 8 * (t / s.sqrt()) * (1 - t * t / (12 * s))

    for p in (1e-6, 0.01, 0.3, 0.49, 0.51, 0.9, 0.999):
        t = student_t_ppf(p, 4)
        pdf = float(stats.t.pdf(t, 4))
        # the quantile error implied by the CDF residual, relative to t
        implied = abs(float(cdf4(t) - Decimal(p))) / pdf / abs(t)
        assert implied < 1e-12, (p, implied)


def test_t_quantile_rejects_bad_arguments():
    for p in (0.0, 1.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="0 < p < 1"):
            student_t_ppf(p, 3)
    for df in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="degrees of freedom"):
            student_t_ppf(0.9, df)


def scipy_lcb(diffs: np.ndarray, alpha: float) -> float:
    n = len(diffs)
    return float(diffs.mean() - stats.t.ppf(1 - alpha, n - 1) * diffs.std(ddof=1) / math.sqrt(n))


def test_paired_lcb_matches_scipy_reference():
    rng = np.random.default_rng(7)
    for n in (2, 3, 5, 8, 20):
        for alpha in (0.05, 0.05 / 3, 0.01):
            cand = rng.normal(1.0, 0.3, n)
            base = rng.normal(0.8, 0.3, n)
            got = paired_lcb(list(cand), list(base), alpha=alpha, direction="maximize")
            diffs = cand - base
            assert got["n"] == n
            assert got["alpha"] == alpha
            assert got["differences"] == pytest.approx(list(diffs), abs=1e-15)
            assert got["mean"] == pytest.approx(diffs.mean(), rel=1e-12)
            assert got["sd"] == pytest.approx(diffs.std(ddof=1), rel=1e-12)
            assert got["t"] == pytest.approx(stats.t.ppf(1 - alpha, n - 1), rel=1e-9)
            assert got["lcb"] == pytest.approx(scipy_lcb(diffs, alpha), rel=1e-9, abs=1e-12)
            # one-sided t-test agreement: LCB > 0 exactly when scipy rejects at alpha
            p_value = stats.ttest_rel(cand, base, alternative="greater").pvalue
            assert (got["lcb"] > 0) == (p_value < alpha)


def test_minimize_flips_the_sign():
    cand, base = [0.10, 0.12, 0.09, 0.11], [0.20, 0.21, 0.19, 0.22]
    low_is_good = paired_lcb(cand, base, alpha=0.05, direction="minimize")
    high_is_good = paired_lcb(cand, base, alpha=0.05, direction="maximize")
    assert low_is_good["differences"] == pytest.approx([-d for d in high_is_good["differences"]])
    assert low_is_good["mean"] > 0 > high_is_good["mean"]
    assert low_is_good["lcb"] > 0
    assert low_is_good["sd"] == pytest.approx(high_is_good["sd"])


def test_zero_spread_lcb_is_the_mean():
    got = paired_lcb([0.3] * 5, [0.2] * 5, alpha=0.01, direction="maximize")
    assert got["sd"] == 0.0
    assert got["lcb"] == got["mean"] == pytest.approx(0.1)
    tied = paired_lcb([0.5] * 4, [0.5] * 4, alpha=0.05, direction="maximize")
    assert tied["lcb"] == 0.0
    assert guard_verdict(tied, margin=0.0, complete=True)[0] is False


def test_too_few_seeds_gives_no_lcb_with_reason():
    one = paired_lcb([1.0], [0.0], alpha=0.05, direction="maximize")
    assert one["lcb"] is None and one["n"] == 1 and one["mean"] == 1.0
    assert "one paired seed" in one["reason"]
    none = paired_lcb([], [], alpha=0.05, direction="maximize")
    assert none["lcb"] is None and "no paired seeds" in none["reason"]
    replaced, why = guard_verdict(one, margin=0.0, complete=True)
    assert not replaced and "baseline kept" in why and "one paired seed" in why


def test_paired_lcb_rejects_bad_input():
    with pytest.raises(ValueError, match="one baseline score per candidate"):
        paired_lcb([1.0, 2.0], [1.0], alpha=0.05, direction="maximize")
    with pytest.raises(ValueError, match="direction"):
        paired_lcb([1.0, 2.0], [1.0, 2.0], alpha=0.05, direction="up")
    with pytest.raises(ValueError, match="not finite"):
        paired_lcb([1.0, float("nan")], [1.0, 2.0], alpha=0.05, direction="maximize")
    with pytest.raises(ValueError, match="alpha"):
        paired_lcb([1.0, 2.0], [1.0, 2.0], alpha=0.0, direction="maximize")


def replacement_rate(cand: np.ndarray, base: np.ndarray, alpha: float, direction: str) -> float:
    hits = sum(
        paired_lcb(c.tolist(), b.tolist(), alpha=alpha, direction=direction)["lcb"] > 0
        for c, b in zip(cand, base, strict=True)
    )
    return hits / len(cand)


@pytest.mark.parametrize("noise", ["normal", "student_t3"])
def test_false_replacement_rate_is_at_most_alpha_prime(noise):
    trials, seeds = 20_000, 5
    a_prime = alpha_prime(0.05, 3)
    rng = np.random.default_rng(20240611)
    if noise == "normal":
        cand = rng.normal(0.7, 0.02, (trials, seeds))
        base = rng.normal(0.7, 0.02, (trials, seeds))
    else:
        cand = 0.7 + 0.02 * rng.standard_t(3, (trials, seeds))
        base = 0.7 + 0.02 * rng.standard_t(3, (trials, seeds))
    tolerance = 3 * math.sqrt(a_prime * (1 - a_prime) / trials)
    for direction in ("maximize", "minimize"):
        rate = replacement_rate(cand, base, a_prime, direction)
        assert rate <= a_prime + tolerance, (noise, direction, rate)
        if noise == "normal":
            # exact test under normality: the rate is close to alpha', not trivially zero
            assert rate >= a_prime - tolerance, (direction, rate)


def test_clearly_better_candidate_is_replaced():
    trials, seeds = 4_000, 5
    a_prime = alpha_prime(0.05, 3)
    rng = np.random.default_rng(11)
    # paired-difference sd is 0.02 * sqrt(2); the effect is 3 of those
    effect = 3 * 0.02 * math.sqrt(2)
    base = rng.normal(0.7, 0.02, (trials, seeds))
    cand = rng.normal(0.7 + effect, 0.02, (trials, seeds))
    assert replacement_rate(cand, base, a_prime, "maximize") > 0.95
    # the same advantage, expressed as a lower error, under minimize
    assert replacement_rate(1 - cand, 1 - base, a_prime, "minimize") > 0.95


def test_verdict_incomplete_keeps_baseline_whatever_the_lcb():
    strong = paired_lcb([1.0, 1.1, 1.2, 1.05, 1.15], [0.0] * 5, alpha=0.01, direction="maximize")
    assert strong["lcb"] > 0.5
    assert guard_verdict(strong, margin=0.0, complete=False) == (
        False,
        "incomplete guard: baseline kept",
    )
    replaced, why = guard_verdict(strong, margin=0.0, complete=True)
    assert replaced and "replaces baseline" in why


def test_verdict_needs_lcb_strictly_above_margin():
    stats_ = {"lcb": 0.0123}
    assert guard_verdict(stats_, margin=0.0, complete=True)[0] is True
    replaced, why = guard_verdict(stats_, margin=0.02, complete=True)
    assert not replaced and why == "LCB 0.0123 <= margin 0.02: baseline kept"
    replaced, why = guard_verdict({"lcb": 0.0}, margin=0.0, complete=True)
    assert not replaced and why == "LCB 0 <= margin 0: baseline kept"


def test_per_seed_side_scores_mean_over_views_none_if_missing():
    scores = {
        3: {"proxy": 0.5, "x3": 0.7},
        4: {"proxy": 0.6, "x3": None},
        5: {"proxy": 0.4},
        6: {"proxy": 0.1, "x3": 0.3, "final": 99.0},
    }
    got = per_seed_side_scores(scores, ["proxy", "x3"])
    assert got == {3: pytest.approx(0.6), 4: None, 5: None, 6: pytest.approx(0.2)}
    with pytest.raises(ValueError, match="at least one search view"):
        per_seed_side_scores(scores, [])


def test_alpha_prime():
    assert alpha_prime(0.05, 1) == 0.05
    assert alpha_prime(0.05, 4) == pytest.approx(0.0125)
    with pytest.raises(ValueError, match="final_top_k"):
        alpha_prime(0.05, 0)
    with pytest.raises(ValueError, match="alpha"):
        alpha_prime(1.0, 2)
