"""A final pick that holds on data the search never saw: null populations, a tiny constant
advantage, invalid output, guard seeds unique per store and anchored in the ledger."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ringflow.core.errors import InputError
from ringflow.core.jsonio import atomic_write_json
from ringflow.core.seeds import REGISTRY_FILE
from ringflow.core.state import LockedTask
from ringflow.nodes import import_static
from ringflow.ring.lock import lock_ring
from ringflow.scoring import BOOTSTRAP_SEED_BASE, _bootstrap, bootstrap_values, usable
from ringflow.selection.final import (
    choose,
    closest_to_passing,
    guarded_before,
    guarded_before_reason,
    side_problem,
    winners_curse,
)
from ringflow.selection.final import verdict as final_verdict
from ringflow.selection.promote import promote, rank
from ringflow.verify import verify_ring
from ringtools import (
    full_config,
    make_candidate,
    make_task,
)

# ---- invalid output has no score ---------------------------------------------------------


def scored(ring: Path, node: str, view: str, variant: str, value: float | None) -> None:
    path = ring / "nodes" / node / "exec" / view / variant / "score.json"
    record = {"scored": True, "valid": value is not None, "score": value, "reason": ""}
    atomic_write_json(path, record)


def test_invalid_output_has_no_score_in_either_direction():
    for direction in ("maximize", "minimize"):
        assert usable({"scored": True, "valid": False, "score": None}, direction) is None
        # A record written by an older scorer with 0.0 for invalid output is still no score.
        assert usable({"scored": True, "valid": False, "score": 0.0}, direction) is None
        assert usable({"scored": True, "valid": True, "score": -0.3}, direction) == -0.3


def test_invalid_everywhere_never_ranks_above_a_scored_node_with_negative_scores(tmp_path):
    cands = tmp_path / "cands"
    make_candidate(cands / "broken", mean=0.0)
    make_candidate(cands / "meh", mean=-0.5)
    base = make_candidate(tmp_path / "base" / "baseline", mean=-0.3)
    config = full_config(ring_id="neg", task=str(make_task(tmp_path)), candidates=str(cands),
                         baseline=str(base))  # fmt: skip
    ring = lock_ring(config, tmp_path)
    import_static(ring)
    root = Path(ring.ring_dir)
    for view in ring.search_views:
        scored(root, "n000-baseline", view, "s0", -0.3)
        for variant in ("s0", "s1", "s2"):
            scored(root, "n001-broken", view, variant, None)
            scored(root, "n002-meh", view, variant, -0.5)
    promotion = promote(root)
    assert [r["node"] for r in promotion["ranked_by_seed0"]] == ["n002-meh"]
    assert [r["node"] for r in promotion["unscored"]] == ["n001-broken"]
    ranking = rank(root)
    assert ranking["finalists"] == ["n002-meh"]
    chosen, _, _ = choose(ring, {"baseline": "n000-baseline"}, ranking, [])
    assert chosen == "n000-baseline"


# ---- guard seeds: unique per store, anchored in the ledger -------------------------------


def lock(tmp_path: Path, ring_id: str, continue_from: str | None = None, roles=None) -> dict:
    config = full_config(ring_id=ring_id, task=str(make_task(tmp_path, roles=roles)),
                         candidates=str(tmp_path / "cands"), baseline=None,
                         continue_from=continue_from)  # fmt: skip
    return lock_ring(config, tmp_path)


@pytest.fixture
def store_dir(tmp_path):
    make_candidate(tmp_path / "cands" / "a", mean=0.5)
    return tmp_path / "store"


def test_siblings_and_new_chains_on_one_store_get_disjoint_guard_seeds(tmp_path, store_dir):
    first = lock(tmp_path, "first")
    left = lock(tmp_path, "left", continue_from="runs/first")
    right = lock(tmp_path, "right", continue_from="runs/first")
    fresh_chain = lock(tmp_path, "other")
    groups = [set(r.guard_seeds) for r in (first, left, right, fresh_chain)]
    assert groups[0] == {3, 4, 5, 6, 7}
    for i, a in enumerate(groups):
        for b in groups[i + 1 :]:
            assert not a & b
    assert set(right.chain_exposed_seeds) >= groups[0] | groups[1] | groups[2]
    registry = json.loads((store_dir / REGISTRY_FILE).read_text())
    assert [r["ring_id"] for r in registry["rings"]] == ["first", "left", "right", "other"]
    # Locking the same ring again hands out nothing new.
    assert lock(tmp_path, "left", continue_from="runs/first").guard_seeds == left.guard_seeds
    assert len(json.loads((store_dir / REGISTRY_FILE).read_text())["rings"]) == 4


def test_a_tampered_ancestor_lock_fails_verify_and_the_ancestor_check(tmp_path, store_dir):
    lock(tmp_path, "first")
    child = lock(tmp_path, "child", continue_from="runs/first")
    assert verify_ring(child.ring_dir) == []
    path = tmp_path / "runs" / "first" / "RING.json"
    ancestor = json.loads(path.read_text())
    ancestor["guard_seeds"], ancestor["chain_exposed_seeds"] = [], []
    os.chmod(path, 0o644)
    path.write_text(json.dumps(ancestor))
    problems = verify_ring(child.ring_dir)
    assert any("ancestor" in p and "guard_seeds" in p for p in problems), problems
    assert any("guard_seeds" in p for p in verify_ring(tmp_path / "runs" / "first"))
    with pytest.raises(InputError, match=r"does not verify.*(guard_seeds|RING\.json)"):
        lock(tmp_path, "grandchild", continue_from="runs/child")


def test_a_program_guarded_in_an_earlier_ring_is_not_guarded_again(tmp_path, store_dir):
    roles = {"search": ["proxy"], "guard": ["guard"], "final": "final"}
    first = lock(tmp_path, "first", roles=roles)
    import_static(first)
    verdict = {"rank": 1, "node": "n001-a", "eligible": True, "replace": False,
               "guard": {"views": ["guard"], "complete": True}}  # fmt: skip
    atomic_write_json(tmp_path / "runs" / "first" / "selection" / "verdict-1.json", verdict)
    second = lock(tmp_path, "second", continue_from="runs/first", roles=roles)
    import_static(second)
    before = guarded_before(second, "n001-a")
    assert before == {"ring": "first", "node": "n001-a", "views": ["guard"]}
    assert guarded_before_reason(before, "n001-a") == (
        "already guarded in ring first on the same guard rows: not guarded again"
    )
    # A copy of the program (same tree, another name) was guarded as the other node.
    assert guarded_before_reason(before, "n002-copy") == (
        "already guarded in ring first as n001-a (the same program) on the same guard rows: "
        "not guarded again"
    )
    # A new ring on other guard rows may guard it.
    assert guarded_before(first, "n001-a") is None
    # Its verdict is written without a review, which would decide nothing.
    ranking = tmp_path / "runs" / "second" / "selection" / "ranking.json"
    atomic_write_json(ranking, {"finalists": ["n001-a"], "ranked": []})
    record = final_verdict(second.ring_dir, 1)
    assert record["outcome"] == "guarded_before" and record["review"] is None
    assert not (tmp_path / "runs" / "second" / "selection" / "review-n001-a.json").exists()


SEED_SCORER = (
    "import argparse, json\n"
    "p = argparse.ArgumentParser()\n"
    "for a in ('--pred', '--labels', '--out'): p.add_argument(a)\n"
    "p.add_argument('--seed', type=int)\n"
    "p.add_argument('--bootstrap', type=int, default=0)\n"
    "a = p.parse_args()\n"
    "rec = {'score': a.seed % 7 / 10, 'valid': True, 'reason': ''}\n"
    "if a.bootstrap: rec['bootstrap'] = [(a.seed + b) % 7 / 10 for b in range(a.bootstrap)]\n"
    "json.dump(rec, open(a.out, 'w'))\n"
)


@pytest.mark.parametrize("batched", [False, True])
def test_bootstrap_scores_come_from_one_call_or_one_call_per_resample(tmp_path, batched):
    """The scorer itself runs (directly here; a ring runs it in the evaluator sandbox)."""
    scorer = tmp_path / "scorer.py"
    scorer.write_text(SEED_SCORER)
    calls = []

    def call_scorer(seed, extra):
        out = tmp_path / f"out-{seed}.json"
        argv = [sys.executable, str(scorer), "--pred", "p", "--labels", "l", "--seed",
                str(seed), "--out", str(out), *extra]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        calls.append(extra)
        return ("done" if done.returncode == 0 else "exit"), done.stderr, out

    task = LockedTask(scorer_bootstrap=batched)
    record = _bootstrap(task, 4, call_scorer, 60.0)
    assert record["bootstrap"] == [(BOOTSTRAP_SEED_BASE + b) % 7 / 10 for b in range(4)]
    assert len(calls) == (1 if batched else 4)


def test_a_scorer_that_returns_no_bootstrap_list_fails_as_a_scorer():
    values, why = bootstrap_values({"valid": True, "score": 0.5}, True, 9)
    assert values is None and "'bootstrap'" in why
    values, why = bootstrap_values({"valid": False, "score": None}, False, 9)
    assert values is None and "no valid score" in why
    assert bootstrap_values({"valid": True, "score": 0.5}, False, 9) == ([0.5], "")


def run(seed: int, status="ok", score=0.5, bootstrap=(0.5,), budget_cut=False, reason=""):
    return {"view": "guard", "seed": seed, "status": status, "budget_cut": budget_cut,
            "score": score, "bootstrap": list(bootstrap) if bootstrap else None,
            "reason": reason}  # fmt: skip


@pytest.mark.parametrize(
    ("bad", "kind"),
    [
        (run(4, status="crash", score=None, bootstrap=None, reason="exit 1"), "failed"),
        (run(4, score=None, bootstrap=None, reason="invalid: bad header"), "failed"),
        (run(4, status="interrupted", score=None, bootstrap=None, budget_cut=True), "incomplete"),
        (run(4, status="interrupted", score=None, bootstrap=None, reason="orphaned"), "incomplete"),
        (run(4, status=None, score=None, bootstrap=None), "incomplete"),
    ],
)
def test_a_guard_side_tells_its_own_failure_from_an_incomplete_guard(bad, kind):
    problem = side_problem([run(3), bad, run(5)])
    assert problem is not None and problem[0] == kind and "guard/g4" in problem[1]
    assert side_problem([run(3), run(4), run(5)]) is None
    # Time running out anywhere outranks a failure elsewhere: the guard is incomplete.
    cut = run(5, status="interrupted", score=None, bootstrap=None, budget_cut=True)
    assert side_problem([bad, cut])[0] == "incomplete"


def test_a_decision_without_a_winner_shows_the_guard_of_the_finalist_closest_to_passing():
    def verdict(node, lcb, complete=True):
        return {"node": node, "guard": {"lcb": lcb, "complete": complete}}

    far, close, tie, last = (verdict("n1", -0.5), verdict("n2", -0.01), verdict("n3", -0.01),
                             verdict("n4", -0.9))  # fmt: skip
    assert closest_to_passing([far, close, tie, last]) is close  # the first on a tie
    # An incomplete guard's bound is not a comparison: the complete ones are preferred.
    assert closest_to_passing([far, verdict("n5", 0.3, complete=False)]) is far
    unbounded = [verdict("n6", None), verdict("n7", None)]
    assert closest_to_passing(unbounded) is unbounded[-1]
    assert closest_to_passing([]) is None
    # A finalist that tied the reference on every run (no spread, so no bound) is closer
    # than one surely worse: its mean difference stands for its bound.
    tied = {"node": "n8", "guard": {"lcb": None, "mean": 0.0, "complete": True}}
    worse = verdict("n9", -4.79)
    assert closest_to_passing([tied, worse]) is tied


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_the_winners_curse_is_signed_in_the_tasks_direction_with_an_interval_around_it(direction):
    # The finalist looked 2.0 better than the baseline on the search views and 1.5 better
    # on the guard; the baseline itself scored 0.25 worse on the guard than on search.
    worse = -1.0 if direction == "maximize" else 1.0
    better = -worse
    base = {"search_mean": 10.0, "guard_mean": 10.0 + 0.25 * worse}
    promotion = 10.0 + 2.0 * better
    guard_mean = base["guard_mean"] + 1.5 * better
    rows = [{"node": "n001-a", "promotion_mean": promotion, "guard_mean": guard_mean,
             "shrinkage": guard_mean - promotion}]  # fmt: skip
    verdicts = [{"node": "n001-a", "guard": {"bootstrap": {"interval": [1.25, 1.75]}}}]
    curse = winners_curse("n001-a", rows, base, verdicts, direction)
    assert curse["curse"] == pytest.approx(-0.5)  # 1.5 on the guard against 2.0 on search
    assert curse["change"] == pytest.approx(-0.75) and curse["baseline_change"] == -0.25
    low, high = curse["interval"]
    assert low == pytest.approx(-0.75) and high == pytest.approx(-0.25)
    assert low <= curse["curse"] <= high
