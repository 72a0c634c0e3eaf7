"""Final selection's edges through whole rings: non-finite candidate scores, a program
without weights whose output varies, a view-dependent program caught by the view-blind
check's further runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ringtools import make_candidate, make_task, snakemake, write_config

pytestmark = pytest.mark.e2e

GUARDED = {"search": ["proxy"], "guard": ["guard"], "final": "final"}


def run_ring(work: Path, ring_id: str, baseline: dict, candidates: dict, **config) -> Path:
    task = make_task(work, roles=GUARDED)
    cands = work / f"{ring_id}-candidates"
    for name, behaviour in candidates.items():
        make_candidate(cands / name, **behaviour)
    base = make_candidate(work / f"{ring_id}-baseline" / "baseline", **baseline)
    path = write_config(work, ring_id=ring_id, task=str(task), candidates=str(cands),
                        baseline=str(base), **config)  # fmt: skip
    snakemake(work, path)
    return work / "runs" / ring_id


def test_three_candidates_with_nan_scores_leave_the_baseline_in_final(tmp_path):
    nan = float("nan")
    ring = run_ring(tmp_path, "nans", baseline={"mean": 0.5},
                    candidates={f"nan{i}": {"mean": nan} for i in range(3)})  # fmt: skip
    assert not (ring / "STOPPED.json").exists()
    final = json.loads((ring / "final" / "FINAL.json").read_text())
    assert final["decision"] == "baseline" and final["chosen"] == final["baseline"]
    score = json.loads((ring / "nodes" / "n001-nan0" / "exec" / "proxy" / "s0" /
                        "score.json").read_text())  # fmt: skip
    assert score["non_finite"] and not score["valid"] and "non-finite" in score["reason"]
    assert not (ring / "evaluator_failures").exists()


def test_a_varying_program_without_weights_passes_review(tmp_path):
    ring = run_ring(tmp_path, "jitter", baseline={"mean": 0.5, "sd": 0.01, "noise_key": "b"},
                    candidates={"jit": {"mean": 0.9, "sd": 0.01, "jitter": 0.001}})  # fmt: skip
    review = json.loads((ring / "selection" / "review-n001-jit.json").read_text())
    assert review["passed"] and review["outcome"] == "passed", review["reasons"]
    check = review["checks"][0]
    assert check["screen"]["flagged"] and check["screen"]["varies"]
    assert len(check["confirmation"]["disguised"]) == 10
    final = json.loads((ring / "final" / "FINAL.json").read_text())
    assert final["decision"] == "candidate" and final["passed_over"] == []
    judged = final["guard_judged"]
    assert judged["program_noise"] and not judged["rows"] and not judged["training_luck"]
    assert judged["scorer_mode"] == "fixed" and judged["rows_resampled_by"] is None
    assert any("program" in w and "noise only" in w for w in final["warnings"])


def test_a_view_dependent_program_is_caught_by_the_further_runs(tmp_path):
    sly = {"mean": 0.9, "sd": 0.01, "view_sensitive": True}
    ring = run_ring(tmp_path, "sly", baseline={"mean": 0.5, "sd": 0.01, "noise_key": "b"},
                    candidates={"sly": sly})  # fmt: skip
    review = json.loads((ring / "selection" / "review-n001-sly.json").read_text())
    assert review["outcome"] == "failed" and "depend on the view" in review["reasons"][0]
    final = json.loads((ring / "final" / "FINAL.json").read_text())
    assert final["decision"] == "baseline"
    (over,) = final["passed_over"]
    assert over["node"] == "n001-sly" and over["outcome"] == "failed_review"


def test_guard_retrain_trains_every_guard_run_and_says_so(tmp_path):
    trained = {"mean": 0.9, "sd": 0.01, "weights": True}
    base = {"mean": 0.5, "sd": 0.01, "weights": True, "noise_key": "b"}
    ring = run_ring(tmp_path, "retrain", baseline=base,
                    candidates={"good": trained}, guard={"retrain": True})  # fmt: skip
    final = json.loads((ring / "final" / "FINAL.json").read_text())
    assert final["decision"] == "candidate", final["reason"]
    assert final["guard_judged"]["training_luck"]
    assert final["ships"]["run"] == "final/s0" and final["ships"]["final_view_score"] > 0.8
    for node in (final["chosen"], final["baseline"]):
        for seed in final["guard"]["seeds"]:
            exec_dir = ring / "nodes" / node / "exec" / "guard" / f"g{seed}"
            result = json.loads((exec_dir / "result.json").read_text())
            assert result["weights_mode"] == "train", (node, seed)
    assert "guard.retrain" in final["note"]


def test_a_review_cut_by_the_clock_leaves_the_finalist_not_reviewed(tmp_path):
    """The review's disguised runs start after a moment the test picks (the search's seed-0
    runs come before it; the slow promotion seeds push the review past it) and then run
    long: the review stage's deadline cuts them. Not a failed review: not reviewed, the
    baseline stays, and the summary names the finalist passed over and why."""
    import subprocess
    import sys
    import time

    good = {"mean": 0.8, "sd": 0.01, "seed_sleep": {"1": 45, "2": 45},
            "seed0_slow_after": time.time() + 30, "seed0_slow_s": 600}  # fmt: skip
    ring = run_ring(tmp_path, "tight", baseline={"mean": 0.5, "sd": 0.01, "noise_key": "b"},
                    candidates={"good": good},
                    timeline={"duration_min": 4, "final_reserve_min": 3.5})  # fmt: skip
    s0 = json.loads((ring / "nodes" / "n001-good" / "exec" / "proxy" / "s0" /
                     "result.json").read_text())  # fmt: skip
    assert s0["started_at"] < good["seed0_slow_after"], "the search's seed-0 run started late"
    review = json.loads((ring / "selection" / "review-n001-good.json").read_text())
    assert review["outcome"] == "not_reviewed" and review["cut"] and not review["passed"]
    assert "was cut" in review["reasons"][0]
    cut = json.loads((ring / "nodes" / "n001-good" / "exec" / "proxy" / "blind-s0" /
                      "result.json").read_text())  # fmt: skip
    assert cut["status"] == "interrupted" and cut["budget_cut"]
    final = json.loads((ring / "final" / "FINAL.json").read_text())
    assert final["decision"] == "baseline"
    assert final["passed_over"] == [{"rank": 1, "node": "n001-good", "outcome": "not_reviewed",
                                     "reason": final["verdicts"][0]["reason"]}]  # fmt: skip
    assert "failed" not in final["verdicts"][0]["outcome"]
    text = subprocess.run([sys.executable, "-m", "ringflow", "summary", str(ring)],
                          capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert "passed over: n001-good (rank 1, not reviewed): not reviewed:" in text
    assert "review failed" not in text
