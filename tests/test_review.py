"""The view-blind check on scores written by hand: what counts as view dependence."""

from __future__ import annotations

import json

import pytest

from ringflow.jsonio import atomic_write_json
from ringflow.selection.final import review
from ringtools import locked_ring, make_candidate


def scores(ring, node: str, **by_variant: float) -> None:
    for variant, value in by_variant.items():
        variant = {"blind2_s0": "blind2-s0"}.get(variant, variant.replace("_", "-"))
        path = ring / "nodes" / node / "exec" / "proxy" / variant / "score.json"
        atomic_write_json(path, {"score": value, "valid": True, "scored": True, "reason": ""})


@pytest.fixture
def ring(tmp_path):
    make_candidate(tmp_path / "cands" / "plain", mean=0.5)
    make_candidate(tmp_path / "cands" / "trained", mean=0.5, weights=True)
    return locked_ring(tmp_path, tmp_path / "cands", "reviewed")


def test_a_program_without_weights_must_score_the_same_on_the_disguised_copies(ring):
    scores(ring, "n001-plain", s0=0.80, blind_s0=0.80, blind2_s0=0.80)
    assert review(ring, "n001-plain")["passed"]
    scores(ring, "n001-plain", blind_s0=0.7999, blind2_s0=0.7998)
    record = review(ring, "n001-plain")
    assert not record["passed"] and "depend on the view" in record["reasons"][0]


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
    scores(ring, "n001-plain", blind_s0=real * (1 + 1e-3), blind2_s0=real * (1 + 2e-3))
    assert not review(ring, "n001-plain")["passed"]


@pytest.mark.parametrize(
    ("blind", "passed"), [((0.79, 0.785), True), ((0.77, 0.772), False), ((0.70, 0.80), True)]
)
def test_a_trained_program_is_allowed_its_own_retraining_noise(ring, blind, passed):
    # Two fresh retrains on the disguised copies differ by their retraining noise; the
    # real score (registered weights) may be that far from them, times a safety factor.
    scores(ring, "n002-trained", s0=0.80, blind_s0=blind[0], blind2_s0=blind[1])
    record = review(ring, "n002-trained")
    assert record["passed"] is passed
    check = record["checks"][0]
    assert check["retrain_noise"] == pytest.approx(abs(blind[0] - blind[1]))
    saved = json.loads((ring / "selection" / "review-n002-trained.json").read_text())
    assert saved["passed"] is passed


def test_the_reproduction_run_is_not_part_of_the_check(ring):
    scores(ring, "n002-trained", s0=0.80, blind_s0=0.80, blind2_s0=0.80, fresh_s0=0.2)
    assert review(ring, "n002-trained")["passed"]


def test_a_missing_run_makes_the_check_fail_as_incomplete(ring):
    scores(ring, "n002-trained", s0=0.80, blind_s0=0.80)
    record = review(ring, "n002-trained")
    assert not record["passed"] and "incomplete" in record["reasons"][0]
