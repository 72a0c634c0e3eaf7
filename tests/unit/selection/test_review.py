"""The view-blind check on scores written by hand: what counts as view dependence, what a
cut run means, when more disguised runs are needed."""

from __future__ import annotations

import json

import pytest

from ringflow.core.jsonio import atomic_write_json
from ringflow.selection.final import ends_selection, review, review_variants, screen
from ringtools import locked_ring, make_candidate

EXTRA = [f"blind{n}-s0" for n in range(3, 11)]


def variant_name(name: str) -> str:
    return {"blind2_s0": "blind2-s0"}.get(name, name.replace("_", "-"))


def scores(ring, node: str, **by_variant: float) -> None:
    for variant, value in by_variant.items():
        path = ring / "nodes" / node / "exec" / "proxy" / variant_name(variant) / "score.json"
        atomic_write_json(path, {"score": value, "valid": True, "scored": True, "reason": ""})


def results(ring, node: str, **by_variant: dict) -> None:
    for variant, result in by_variant.items():
        path = ring / "nodes" / node / "exec" / "proxy" / variant_name(variant) / "result.json"
        atomic_write_json(path, {"status": "ok", "budget_cut": False, "reason": "", **result})


def extra_scores(ring, node: str, real: float, disguised: list[float]) -> None:
    scores(ring, node, real_s0=real)
    scores(ring, node, **{v.replace("-", "_"): s for v, s in zip(EXTRA, disguised, strict=True)})


@pytest.fixture
def ring(tmp_path):
    make_candidate(tmp_path / "cands" / "plain", mean=0.5)
    make_candidate(tmp_path / "cands" / "trained", mean=0.5, weights=True)
    return locked_ring(tmp_path, tmp_path / "cands", "reviewed")


def test_a_program_whose_output_does_not_vary_must_score_the_same(ring):
    scores(ring, "n001-plain", s0=0.80, blind_s0=0.80, blind2_s0=0.80)
    assert review(ring, "n001-plain")["passed"]
    scores(ring, "n001-plain", blind_s0=0.7999, blind2_s0=0.7999)
    record = review(ring, "n001-plain")
    assert record["outcome"] == "failed" and "depend on the view" in record["reasons"][0]


def test_a_varying_program_without_weights_is_judged_by_more_disguised_runs(ring):
    scores(ring, "n001-plain", s0=0.80, blind_s0=0.7999, blind2_s0=0.7998)
    first = screen(ring, "n001-plain")
    assert first["flagged"] and first["varies"] and first["outcome"] is None
    assert review_variants(first) == ["real-s0", *EXTRA]
    spread = [0.8001, 0.7997, 0.8002, 0.7999, 0.8000, 0.7996, 0.8003, 0.7998]
    extra_scores(ring, "n001-plain", 0.8000, spread)
    record = review(ring, "n001-plain")
    assert record["passed"], record["reasons"]
    low, high = record["checks"][0]["confirmation"]["interval"]
    assert low < 0.8 < high and high - low < 0.01
    extra_scores(ring, "n001-plain", 0.7900, spread)  # 30 of its own SDs away
    record = review(ring, "n001-plain")
    assert record["outcome"] == "failed" and "prediction interval" in record["reasons"][0]


def test_one_copy_that_differs_is_not_confirmed_by_the_re_check(ring):
    scores(ring, "n001-plain", s0=0.80, blind_s0=0.70, blind2_s0=0.80)
    assert review(ring, "n001-plain")["passed"]


@pytest.mark.parametrize("scale", [1.0, 1e-4, 1e4])
def test_arithmetic_noise_relative_to_the_scale_passes(ring, scale):
    # float32 summation order after a reordering: differences of ~1e-8 relative.
    real = 0.145236 * scale
    scores(ring, "n001-plain", s0=real, blind_s0=real * (1 + 1.3e-8), blind2_s0=real * (1 - 9e-9))
    record = review(ring, "n001-plain")
    assert record["passed"], record["reasons"]
    scores(ring, "n001-plain", blind_s0=real * (1 + 1e-3), blind2_s0=real * (1 + 1e-3))
    assert review(ring, "n001-plain")["outcome"] == "failed"


@pytest.mark.parametrize(
    ("blind", "flagged"), [((0.79, 0.785), False), ((0.77, 0.772), True), ((0.70, 0.80), False)]
)
def test_a_trained_program_is_allowed_its_own_retraining_noise(ring, blind, flagged):
    # Two fresh retrains on the disguised copies differ by their retraining noise; the
    # real score (registered weights) may be that far from them, times a safety factor;
    # beyond it, more disguised runs decide.
    scores(ring, "n002-trained", s0=0.80, blind_s0=blind[0], blind2_s0=blind[1])
    first = screen(ring, "n002-trained")
    assert first["flagged"] is flagged
    assert first["retrain_noise"] == pytest.approx(abs(blind[0] - blind[1]))
    record = review(ring, "n002-trained")
    assert record["outcome"] == ("not_reviewed" if flagged else "passed")
    saved = json.loads((ring / "selection" / "review-n002-trained.json").read_text())
    assert saved["passed"] is not flagged


def test_the_reproduction_run_is_not_part_of_the_check(ring):
    scores(ring, "n002-trained", s0=0.80, blind_s0=0.80, blind2_s0=0.80, fresh_s0=0.2)
    assert review(ring, "n002-trained")["passed"]


def test_a_missing_run_leaves_the_finalist_not_reviewed(ring):
    scores(ring, "n002-trained", s0=0.80, blind_s0=0.80)
    record = review(ring, "n002-trained")
    assert record["outcome"] == "not_reviewed" and record["cut"]
    assert "blind2-s0 did not run" in record["reasons"][0]


def test_a_run_cut_by_the_deadline_is_not_a_failed_review(ring):
    scores(ring, "n001-plain", s0=0.80, blind_s0=0.80)
    results(ring, "n001-plain", s0={}, blind_s0={},
            blind2_s0={"status": "interrupted", "budget_cut": True,
                        "reason": "not started: the deadline had passed"})  # fmt: skip
    record = review(ring, "n001-plain")
    assert record["outcome"] == "not_reviewed" and not record["passed"] and record["cut"]
    assert "the deadline had passed" in record["reasons"][0]
    assert "depend on the view" not in record["reasons"][0]
    verdict = {"node": "n001-plain", "eligible": False, "replace": False,
               "outcome": "not_reviewed", "cut": True}  # fmt: skip
    assert ends_selection(verdict)


def test_a_crash_on_a_disguised_copy_fails_the_review(ring):
    scores(ring, "n001-plain", s0=0.80)
    atomic_write_json(ring / "nodes" / "n001-plain" / "exec" / "proxy" / "blind-s0" / "score.json",
                      {"score": None, "valid": False, "scored": False,
                       "reason": "not scored: execution crash"})  # fmt: skip
    scores(ring, "n001-plain", blind2_s0=0.80)
    results(ring, "n001-plain", s0={}, blind_s0={"status": "crash"}, blind2_s0={})
    assert review(ring, "n001-plain")["outcome"] == "failed"


def test_too_costly_further_trainings_leave_it_not_reviewed_without_ending_selection(ring):
    scores(ring, "n002-trained", s0=0.80, blind_s0=0.77, blind2_s0=0.772)
    results(ring, "n002-trained", s0={"wall_s": 900}, blind_s0={"wall_s": 900},
            blind2_s0={"wall_s": 800})  # fmt: skip
    first = screen(ring, "n002-trained")
    assert first["outcome"] == "not_reviewed" and review_variants(first) == []
    assert "max_extra_train_min" in first["reason"]
    record = review(ring, "n002-trained")
    assert record["outcome"] == "not_reviewed" and not record["cut"]


def test_a_cut_review_is_named_in_the_verdict_and_the_summary(ring):
    from ringflow.reporting.summary import decision_detail_lines
    from ringflow.selection.final import passed_over, verdict

    scores(ring, "n001-plain", s0=0.80, blind_s0=0.80)
    results(ring, "n001-plain", s0={}, blind_s0={},
            blind2_s0={"status": "interrupted", "budget_cut": True,
                        "reason": "not started: the deadline had passed"})  # fmt: skip
    review(ring, "n001-plain")
    ranking = {"finalists": ["n001-plain", "n002-trained"], "ranked": []}
    atomic_write_json(ring / "selection" / "ranking.json", ranking)
    record = verdict(ring, 1)
    assert record["outcome"] == "not_reviewed" and record["cut"] and not record["eligible"]
    assert record["reason"].startswith("not reviewed: ") and "failed" not in record["reason"]
    assert ends_selection(record)  # time ran out: no other finalist is tried instead
    over = passed_over(ranking, [record], chosen="n000-baseline")
    assert [(o["node"], o["outcome"]) for o in over] == [
        ("n001-plain", "not_reviewed"), ("n002-trained", "not_reached")]  # fmt: skip
    lines = decision_detail_lines({"passed_over": over})
    assert any("passed over: n001-plain (rank 1, not reviewed): not reviewed:" in x and
               "the deadline had passed" in x for x in lines)  # fmt: skip
