"""Guard statistics: the verdict, per-seed side scores, alpha' (the bootstrap bound itself
is tested in test_guard_bootstrap.py)."""

from __future__ import annotations

import pytest

from ringflow.guardstats import alpha_prime, guard_verdict, per_seed_side_scores


def test_verdict_incomplete_keeps_baseline_whatever_the_lcb():
    strong = {"lcb": 0.9}
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
    with pytest.raises(ValueError, match="at least one view"):
        per_seed_side_scores(scores, [])


def test_alpha_prime():
    assert alpha_prime(0.05, 1) == 0.05
    assert alpha_prime(0.05, 4) == pytest.approx(0.0125)
    with pytest.raises(ValueError, match="final_top_k"):
        alpha_prime(0.05, 0)
    with pytest.raises(ValueError, match="alpha"):
        alpha_prime(1.0, 2)
