"""Final selection through whole rings: scripted candidates whose scores the test sets,
against a scripted baseline, on a task with a guard view (unless a test says otherwise)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ringtools import make_candidate, make_task, results, snakemake, write_config

pytestmark = pytest.mark.e2e


GUARDED = {"search": ["proxy"], "guard": ["guard"], "final": "final"}


def run_ring(
    work: Path,
    ring_id: str,
    *,
    baseline: dict | None,
    candidates: dict[str, dict],
    roles: dict | None = GUARDED,
    **config,
) -> Path:
    task = work / "task" if (work / "task").exists() else make_task(work, roles=roles)
    cands = work / f"{ring_id}-candidates"
    for name, behaviour in candidates.items():
        make_candidate(cands / name, **behaviour)
    base = None
    if baseline is not None:
        base = str(make_candidate(work / f"{ring_id}-baseline" / "baseline", **baseline))
    path = write_config(
        work, ring_id=ring_id, task=str(task), candidates=str(cands), baseline=base, **config
    )
    snakemake(work, path)
    return work / "runs" / ring_id


def final_of(ring: Path) -> dict:
    return json.loads((ring / "final" / "FINAL.json").read_text())


def test_a_clearly_better_candidate_replaces_the_baseline(tmp_path):
    ring = run_ring(
        tmp_path,
        "better",
        baseline={"mean": 0.5, "sd": 0.01, "noise_key": "b"},
        candidates={"good": {"mean": 0.8, "sd": 0.01, "weights": True}},
    )
    final = final_of(ring)
    assert final["decision"] == "candidate" and final["chosen"] == "n001-good"
    guard = final["guard"]
    assert guard["seeds"] == [3, 4, 5, 6, 7] and guard["complete"]
    assert guard["views"] == ["guard"] and not final["guard_reused_search_rows"]
    assert len(guard["differences"]) == 5 and all(d > 0.2 for d in guard["differences"])
    # The mean advantage shown is the guard seeds' own, as their table beside it shows.
    assert guard["mean"] == pytest.approx(sum(guard["differences"]) / 5, abs=1e-12)
    # One finalist ranked: it is tested at alpha / 1, not alpha / final_top_k.
    assert guard["lcb"] > guard["margin"] and guard["alpha"] == pytest.approx(0.05)
    assert guard["bootstrap"]["replicates"] == 200 and guard["bootstrap"]["spread"] > 0
    assert final["final_view"]["chosen"] == pytest.approx(0.8, abs=0.05)
    assert final["final_view"]["baseline"] == pytest.approx(0.5, abs=0.05)
    assert final["weights"]["sha256"]
    assert final["promotion_mean"] == pytest.approx(0.8, abs=0.05)
    assert final["guard_mean"] == pytest.approx(0.8, abs=0.05)
    assert final["reviews"][0]["passed"]
    assert final["finalists"][0]["node"] == "n001-good" and final["finalists"][0]["guarded"]
    assert final["selection_gap"]["gap"] == 0.0
    assert set(final["selection_gap"]["compared"]) == {"n001-good", "n000-baseline"}
    assert final["baseline_scores"]["guard_mean"] == pytest.approx(0.5, abs=0.05)
    assert (ring / "final" / "solution" / "behaviour.json").exists()
    repro = json.loads((ring / "final" / "REPRO.json").read_text())
    assert repro["diagnostic_only"] and repro["checks"][0]["outputs_identical"]
    # Guard seeds run on the guard view only: trained there once, replayed for the others.
    res = results(ring)
    guard_runs = {v: r for (n, view, v), r in res.items() if n == "n001-good" and v[0] == "g"}
    assert sorted(guard_runs) == ["g3", "g4", "g5", "g6", "g7"]
    assert sorted(r["weights_mode"] for r in guard_runs.values()) == ["replay"] * 4 + ["train"]
    assert {view for (n, view, v) in res if v[0] == "g"} == {"guard"}
    # The reproduction run started after the decision.
    decided = json.loads((ring / "selection" / "decision.json").read_text())["decided_at"]
    assert res[("n001-good", "proxy", "fresh-s0")]["started_at"] >= decided


def test_baseline_is_seated_before_any_review(tmp_path):
    ring = run_ring(
        tmp_path,
        "order",
        baseline={"mean": 0.5, "sd": 0.01},
        candidates={"good": {"mean": 0.8, "sd": 0.01}},
    )
    seated = json.loads((ring / "selection" / "baseline_seated.json").read_text())
    review = ring / "selection" / "review-n001-good.json"
    events = [json.loads(x) for x in (ring / "events.jsonl").read_text().splitlines()]
    kinds = [e["kind"] for e in events]
    assert seated["baseline"] == "n000-baseline"
    assert kinds.index("baseline_seated") < kinds.index("guard_verdict")
    assert seated["at"] <= review.stat().st_mtime


def test_an_equal_candidate_leaves_the_baseline(tmp_path):
    ring = run_ring(
        tmp_path,
        "equal",
        baseline={"mean": 0.6, "sd": 0.05, "noise_key": "b"},
        candidates={"same": {"mean": 0.6, "sd": 0.05, "noise_key": "c"}},
    )
    final = final_of(ring)
    assert final["decision"] == "baseline" and final["chosen"] == "n000-baseline"
    assert final["guard"]["complete"] and final["guard"]["lcb"] <= 0
    assert final["guard_of"] == "n001-same"  # whose guard the kept baseline's record shows
    assert (ring / "final" / "solution" / "run.py").exists()


def test_a_finalist_that_crashes_on_a_guard_seed_fails_alone(tmp_path):
    ring = run_ring(
        tmp_path,
        "crashy",
        baseline={"mean": 0.5, "sd": 0.01, "noise_key": "b"},
        candidates={
            "flaky": {"mean": 0.9, "sd": 0.01, "crash_seeds": [5]},
            "steady": {"mean": 0.8, "sd": 0.01},
        },
    )
    final = final_of(ring)
    first, second = final["verdicts"]
    assert first["node"] == "n001-flaky" and not first["replace"] and second["replace"]
    assert "failed its guard" in first["reason"] and first["guard"]["failed"]
    assert final["decision"] == "candidate" and final["chosen"] == "n002-steady"


def test_a_baseline_that_crashes_on_a_guard_seed_ends_selection(tmp_path):
    ring = run_ring(
        tmp_path,
        "basecrash",
        baseline={"mean": 0.5, "sd": 0.01, "noise_key": "b", "crash_seeds": [4]},
        candidates={"good": {"mean": 0.9, "sd": 0.01}, "also": {"mean": 0.85, "sd": 0.01}},
    )
    final = final_of(ring)
    assert final["decision"] == "baseline" and len(final["verdicts"]) == 1
    assert final["guard"]["complete"] is False and final["guard"]["lcb"] is None
    assert "incomplete" in final["reason"] and "baseline's" in final["reason"]
    assert not (ring / "selection" / "verdict-2.json").exists()


def test_a_view_reading_candidate_fails_review_and_is_never_chosen(tmp_path):
    ring = run_ring(
        tmp_path,
        "sly",
        baseline={"mean": 0.5, "sd": 0.01, "noise_key": "b"},
        candidates={"sly": {"mean": 0.9, "sd": 0.01, "view_sensitive": True}},
    )
    review = json.loads((ring / "selection" / "review-n001-sly.json").read_text())
    assert review["passed"] is False
    assert "depend on the view" in review["reasons"][0]
    final = final_of(ring)
    assert final["decision"] == "baseline"
    assert not list((ring / "nodes" / "n001-sly" / "exec").glob("*/g*"))
    assert list((ring / "nodes" / "n001-sly" / "exec").glob("*/s0"))


def test_no_baseline_refuses_writes_no_final_and_runs_nothing_after(tmp_path):
    ring = run_ring(
        tmp_path,
        "nobase",
        baseline=None,
        candidates={"good": {"mean": 0.8, "sd": 0.01, "weights": True}},
    )
    assert not (ring / "final").exists()
    decision = json.loads((ring / "selection" / "decision.json").read_text())
    assert decision["decision"] == "refused"
    events = [json.loads(x) for x in (ring / "events.jsonl").read_text().splitlines()]
    refused = next(e for e in events if e["kind"] == "final_guard_refused")
    assert not list((ring / "selection").glob("review-*.json"))
    # No candidate execution starts after the refusal: only the search ran.
    res = results(ring)
    assert {v for (_, _, v) in res} == {"s0", "s0-ablate"}
    assert all(r["started_at"] < refused["ts"] for r in res.values())


def test_guard_seeds_of_a_three_ring_chain_are_disjoint(tmp_path):
    task = make_task(tmp_path)
    cands = tmp_path / "cands"
    make_candidate(cands / "a", mean=0.5)
    seeds, previous = [], None
    for ring_id in ("c1", "c2", "c3"):
        config = write_config(
            tmp_path,
            ring_id=ring_id,
            task=str(task),
            candidates=str(cands),
            baseline=None,
            continue_from=previous,
        )
        snakemake(tmp_path, config, f"runs/{ring_id}/RING.json")
        lock = json.loads((tmp_path / "runs" / ring_id / "RING.json").read_text())
        seeds.append(lock)
        previous = f"runs/{ring_id}"
    guard = [set(lock["guard_seeds"]) for lock in seeds]
    assert guard[0] == {3, 4, 5, 6, 7} and guard[1] == {8, 9, 10, 11, 12}
    assert not (guard[0] & guard[1] or guard[0] & guard[2] or guard[1] & guard[2])
    assert set(seeds[2]["chain_exposed_seeds"]) == guard[0] | guard[1] | guard[2]
    assert seeds[2]["continue_from"] == "../c2"


def test_verify_fails_on_an_edited_ledger(tmp_path):
    ring = run_ring(
        tmp_path, "ledger", baseline=None, candidates={"a": {"mean": 0.5}}, guard={"enabled": False}
    )
    verify = [sys.executable, "-m", "ringflow", "verify", str(ring)]
    assert subprocess.run(verify, capture_output=True).returncode == 0
    lines = (ring / "ledger.jsonl").read_text().splitlines()
    record = json.loads(lines[1])
    record["role"] = "baseline"
    lines[1] = json.dumps(record)
    (ring / "ledger.jsonl").write_text("\n".join(lines) + "\n")
    out = subprocess.run(verify, capture_output=True, text=True)
    assert out.returncode == 1 and "line 2" in out.stdout


def test_a_failing_review_command_makes_the_finalist_ineligible(tmp_path):
    reviewer = tmp_path / "reviewer.py"
    reviewer.write_text(
        "import sys, pathlib\n"
        "node = pathlib.Path(sys.argv[1])\n"
        "print(f'{node.name}: method not signed off')\n"
        "sys.exit(0 if (node / 'SIGNED').exists() else 1)\n"
    )
    ring = run_ring(
        tmp_path,
        "reviewed",
        baseline={"mean": 0.5, "sd": 0.01, "noise_key": "b"},
        candidates={"good": {"mean": 0.9, "sd": 0.01}},
        review=f"{sys.executable} {reviewer}",
    )
    review = json.loads((ring / "selection" / "review-n001-good.json").read_text())
    assert review["passed"] is False
    assert [c["check"] for c in review["checks"]] == ["view_blind", "review_command"]
    assert review["checks"][0]["passed"] and "not signed off" in review["reasons"][0]
    final = final_of(ring)
    assert final["decision"] == "baseline" and "review failed" in final["reason"]
