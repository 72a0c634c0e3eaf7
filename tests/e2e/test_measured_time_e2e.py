"""Time that is measured through real rings: a cold start priced as the training it is,
and stage deadlines that keep a late stage's share."""

from __future__ import annotations

import json
import subprocess

import pytest

from ringtools import (
    locked_ring,
    make_candidate,
    make_task,
    results,
    snakemake,
    step_argv,
    write_config,
)

pytestmark = pytest.mark.e2e


def stage(timing: dict, name: str) -> dict:
    return next(row for row in timing["stages"] if row["stage"] == name)


def test_a_candidate_that_replays_on_seed_0_gets_its_slow_cold_start_reserved(tmp_path):
    cands = tmp_path / "cands"
    make_candidate(cands / "slow", mean=0.6, sd=0.01, weights=True, train_sleep=4)
    # Seed noise of its own on each side: a guard whose differences have no spread never
    # passes (the scripted scorer ignores the seed).
    baseline = make_candidate(tmp_path / "base" / "baseline", mean=0.5, sd=0.01,
                              noise_key="baseline")  # fmt: skip
    # An earlier ring trained its search-view weights into the shared store, so in the
    # ring under test seed 0 only replays: fast, while every training takes 4 s.
    earlier = locked_ring(tmp_path, cands, "earlier")
    for view in ("proxy", "x3"):
        run = step_argv("execute", str(earlier), "n001-slow", view, "s0")
        subprocess.run(run, check=True, capture_output=True)
    config = write_config(tmp_path, ring_id="cold", task=str(make_task(tmp_path)),
                          candidates=str(cands), baseline=str(baseline))  # fmt: skip
    snakemake(tmp_path, config)
    ring = tmp_path / "runs" / "cold"
    done = results(ring)
    node = "n001-slow"
    assert done[(node, "proxy", "s0")]["weights_mode"] == "replay"
    decision = json.loads((ring / "selection" / "decision.json").read_text())
    assert decision["chosen"] == node
    cold = done[(node, "final", "s0")]
    assert cold["weights_mode"] == "train" and cold["status"] == "ok" and not cold["budget_cut"]
    lock = json.loads((ring / "RING.json").read_text())
    assert cold["ended_at"] < lock["stop_at"] - lock["config"]["timeline"]["stop_margin_s"]
    # What was reserved for the final-view stage when it started covers the cold start
    # (a replay-priced seed 0 would not: it takes a fraction of the 4 s training).
    timing = json.loads((ring / "final_timing.json").read_text())
    final = stage(timing, "final")
    cold_s = cold["ended_at"] - cold["started_at"]
    replay_s = done[(node, "proxy", "s0")]["wall_s"]
    assert cold_s > 4 and 1.5 * replay_s < cold_s
    assert final["reserved_at_start_s"] >= cold_s, (cold_s, timing)
    assert final["reserved_at_start_s"] >= final["actual_s"], timing
    # The whole of final selection fits in what was reserved at the end of the search.
    whole = timing["final_selection"]
    assert whole["complete"]
    assert whole["actual_s"] <= whole["reserved_s"] + 60 * whole["pad_min"], timing
    # The reserve's breakdown says how each term was priced.
    breakdown = json.loads((ring / "cutoff.json").read_text())["breakdown"]
    assert all(term["basis"] in ("measured", "assumed") and term["how"] for term in breakdown)
    html = (ring / "report.html").read_text()
    assert 'id="stage-times"' in html and "reserved when it started" in html
    # Each stage that ran also has what its reserved prices came to for the runs it did,
    # and the final view's cold start is among them (priced as a training, so at least
    # the replay's time).
    assert final["priced_ran_s"] is not None and final["priced_ran_s"] >= replay_s, timing
    assert "priced for what ran" in html


def test_a_guard_that_would_overrun_leaves_the_final_view_runs_their_time(tmp_path):
    cands = tmp_path / "cands"
    # Passes every check but takes five minutes on each guard seed: its guard cannot end.
    make_candidate(cands / "late", mean=0.6, guard_sleep=300)
    baseline = make_candidate(tmp_path / "base" / "baseline", mean=0.5, sleep=1)
    timeline = {"duration_min": 2, "final_reserve_min": 1, "reserve_pad_min": 0.5,
                "stop_margin_s": 5, "settle_extra_s": 2}  # fmt: skip
    config = write_config(tmp_path, ring_id="late", task=str(make_task(tmp_path)),
                          candidates=str(cands), baseline=str(baseline), timeline=timeline,
                          guard={"seeds": 3})  # fmt: skip
    snakemake(tmp_path, config)
    ring = tmp_path / "runs" / "late"
    lock = json.loads((ring / "RING.json").read_text())
    hard_end = lock["stop_at"] - timeline["stop_margin_s"]
    done = results(ring)
    cut = [r for (n, _, v), r in done.items() if n == "n001-late" and v.startswith("g")]
    assert cut and all(r["status"] == "interrupted" and r["budget_cut"] for r in cut)
    # The running guard executions were stopped at the guard's own deadline, which left
    # the final-view runs a share of their own before stop_at - stop_margin_s.
    stops = [(e["cutoff"], r) for r in cut for e in r.get("events", []) if e["event"] == "deadline"]
    assert stops
    for guard_deadline, result in stops:
        assert guard_deadline < hard_end - 1
        assert result["ended_at"] <= guard_deadline + 2 + 3  # the grace, slack
    guard_deadline = max(deadline for deadline, _ in stops)
    verdict = json.loads((ring / "selection" / "verdict-1.json").read_text())
    assert verdict["guard"]["complete"] is False and not verdict["replace"]
    decision = json.loads((ring / "selection" / "decision.json").read_text())
    assert decision["decision"] == "baseline"
    final_run = done[("n000-baseline", "final", "s0")]
    assert final_run["status"] == "ok" and not final_run["budget_cut"]
    assert guard_deadline <= final_run["started_at"] and final_run["ended_at"] < hard_end
    assert decision["final_view"]["baseline"] is not None
