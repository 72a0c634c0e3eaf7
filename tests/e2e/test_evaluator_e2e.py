"""The task's scorer and validator: sandboxed, and their failures told apart
(docs/contracts.md#the-evaluators-sandbox)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ringflow.verify import verify_ring
from ringtools import make_candidate, make_task, results, snakemake, write_config

pytestmark = [pytest.mark.e2e, pytest.mark.user]

# Fails on the output of any candidate whose value is 0.13; reports what else it can see.
PICKY_SCORER = """\
import argparse, json, os, sys
p = argparse.ArgumentParser()
for a in ("--pred", "--labels", "--out"):
    p.add_argument(a)
p.add_argument("--seed", type=int)
a = p.parse_args()
value = json.load(open(os.path.join(a.pred, "score.json")))["value"]
if value == 0.13 or os.path.exists("always-fail"):
    sys.exit("scorer: cannot parse this prediction")
seen = [path for path in ("views/final/labels/truth.txt", "views/final/inputs/data.txt")
        if os.path.exists(path)]
json.dump({"score": float(value), "valid": True, "reason": "seen: " + ",".join(seen)},
          open(a.out, "w"))
"""


def ring_with(tmp_path: Path, ring_id: str, means: dict, *, always_fail=False, baseline=True):
    task = make_task(tmp_path)
    (task / "scorer.py").write_text(PICKY_SCORER)
    if always_fail:
        (task / "always-fail").write_text("")
    cands = tmp_path / "cands"
    for name, mean in means.items():
        make_candidate(cands / name, mean=mean)
    base = make_candidate(tmp_path / "base", mean=0.3) if baseline else None
    config = write_config(
        tmp_path, ring_id=ring_id, task=str(task), candidates=str(cands),
        baseline=str(base) if base else None, promote_top_k=1,
        guard={"enabled": False, "seeds": 2, "alpha": 0.05, "margin": 0.0},
    )  # fmt: skip
    done = snakemake(tmp_path, config, check=False)
    return done, tmp_path / "runs" / ring_id


def scores(ring: Path) -> dict:
    out = {}
    for path in ring.glob("nodes/*/exec/*/*/score.json"):
        out[(path.parts[-5], path.parts[-3], path.parts[-2])] = json.loads(path.read_text())
    return out


def test_a_scorer_failing_on_the_baseline_stops_the_ring_with_its_reason(tmp_path):
    done, ring = ring_with(tmp_path, "broken-scorer", {"a": 0.5}, always_fail=True)
    assert done.returncode != 0
    stopped = json.loads((ring / "STOPPED.json").read_text())
    assert "scorer failed on the baseline" in stopped["reason"]
    assert "cannot parse this prediction" in stopped["reason"]
    assert "cannot parse this prediction" in done.stderr
    assert not (ring / "final").exists(), "nothing unscored is seated in final/"
    on_record = [s for (node, _, _), s in scores(ring).items() if node == stopped["node"]]
    assert any(s.get("evaluator_failed") == "scorer" for s in on_record)
    assert verify_ring(ring) == []


def test_a_scorer_failing_on_one_candidate_makes_it_invalid_and_the_ring_goes_on(tmp_path):
    done, ring = ring_with(tmp_path, "picky", {"odd": 0.13, "fine": 0.6})
    assert done.returncode == 0, done.stderr[-3000:]
    record = scores(ring)
    odd = [s for (node, _, _), s in record.items() if node.endswith("-odd")]
    assert odd and all(not s["valid"] and s["score"] is None for s in odd)
    assert all("scorer failed: scorer: cannot parse this prediction" in s["reason"] for s in odd)
    assert all(not s.get("budget_cut") for s in odd)
    fine = [s for (node, _, _), s in record.items() if node.endswith("-fine")]
    # The scorer sees the task's files, never another view's labels or inputs.
    assert fine and all(s["valid"] and s["reason"] == "seen: " for s in fine)
    assert not (ring / "STOPPED.json").exists()


def test_a_scorer_failing_on_too_many_nodes_stops_the_ring(tmp_path):
    means = {"x1": 0.13, "x2": 0.13, "x3": 0.13, "ok": 0.6}
    done, ring = ring_with(tmp_path, "flaky", means)
    assert done.returncode != 0
    stopped = json.loads((ring / "STOPPED.json").read_text())
    assert "failed on 3 distinct nodes" in stopped["reason"]
    assert all(r["status"] != "crash" for r in results(ring).values())
    # The records the ring stopped on stay, as the ledger hashed them: each node it names
    # has its failed scoring on record, and the stopped ring verifies.
    failed = {node for (node, _, _), s in scores(ring).items() if s.get("evaluator_failed")}
    assert failed == set(stopped["nodes"])
    assert verify_ring(ring) == []


SLOW_SCORER = """\
import argparse, time
p = argparse.ArgumentParser()
for a in ("--pred", "--labels", "--out", "--seed"):
    p.add_argument(a)
p.parse_args()
time.sleep(120)
"""


def test_a_cutoff_moved_earlier_stops_a_running_scorer_as_a_budget_cut(tmp_path):
    import subprocess
    import sys
    import time

    from ringflow.core.reserve import CutoffFile
    from ringtools import locked_ring

    cands = tmp_path / "cands"
    make_candidate(cands / "a", mean=0.5)
    ring = locked_ring(tmp_path, cands, "slow-scorer")
    (tmp_path / "task" / "scorer.py").write_text(SLOW_SCORER)
    # Edits under a locked ring are refused by the workflow; this test drives one job.
    proc = subprocess.Popen(
        [sys.executable, "-m", "ringflow", "step", "execute", str(ring), "n001-a", "proxy", "s0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    folder = ring / "nodes" / "n001-a" / "exec" / "proxy" / "s0"
    deadline = time.monotonic() + 60
    while not (folder / "scoring").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (folder / "scoring").exists(), "the scorer never started"
    moved = time.time()
    assert CutoffFile(ring / "cutoff.json").move_earlier(moved, why="test")
    proc.communicate(timeout=60)
    settle = 2 + 5  # term_grace_s + settle_extra_s of config/quick.yaml: search work settles
    assert time.time() - moved <= settle + 5
    score = json.loads((folder / "score.json").read_text())
    assert score["budget_cut"] is True and score["reason"] == "scoring cut by the deadline"
