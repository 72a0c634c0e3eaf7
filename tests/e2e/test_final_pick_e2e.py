"""A final pick that holds on data the search never saw, ring by ring: null populations on
fresh data, a tiny constant advantage under a seed-blind scorer, a task without a guard
view (docs/guard.md)."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest
import yaml

from ringtools import (
    SCORER_ARGS,
    make_candidate,
    make_task,
    snakemake,
    snakemake_argv,
    write_config,
)

# ---- a task scored on rows: every program right on each row with its own probability --

ROW_SCORER = (
    SCORER_ARGS
    + """\
truth = dict(line.split(",") for line in open(os.path.join(a.labels, "y.csv")).read().split())
try:
    pred = dict(line.split(",") for line in open(os.path.join(a.pred, "pred.csv")).read().split())
    hits = [pred[i] == y for i, y in sorted(truth.items())]
except Exception as exc:
    hits = None
    rec = {"score": None, "valid": False, "reason": f"bad predictions: {exc}"}
def accuracy(seed):
    rng = random.Random(seed)
    return sum(rng.choice(hits) for _ in hits) / len(hits)
if hits is not None:
    rec = {"score": accuracy(a.seed), "valid": True, "reason": ""}
    if a.bootstrap:
        rec["bootstrap"] = [accuracy(a.seed + b) for b in range(a.bootstrap)]
json.dump(rec, open(a.out, "w"))
"""
)

# Deterministic: right on each row with probability `p`, the draw fixed by the program's
# own key and the row id (never by --seed).
ROW_PROGRAM = """\
import hashlib, json, os
b = json.load(open("behaviour.json"))
rows = open(os.path.join(os.environ["RINGFLOW_INPUT_DIR"], "x.csv")).read().split()
out = []
for line in rows:
    i, x = line.split(",")
    u = int(hashlib.sha256(f"{b['key']}/{i}".encode()).hexdigest()[:8], 16) / 2**32
    out.append(f"{i},{x if u < b['p'] else str(1 - int(x))}")
open(os.path.join(os.environ["RINGFLOW_OUTPUT_DIR"], "pred.csv"), "w").write("\\n".join(out))
"""

ROWS = {"proxy": 200, "guard": 300, "final": 200}


def make_row_task(folder: Path, data_seed: int) -> Path:
    folder.mkdir(parents=True)
    spec = {"name": "rows", "direction": "maximize", "scorer": "python scorer.py",
            "scorer_bootstrap": True,
            "views": {"search": ["proxy"], "guard": ["guard"], "final": "final"}}  # fmt: skip
    (folder / "task.yaml").write_text(yaml.safe_dump(spec))
    (folder / "scorer.py").write_text(ROW_SCORER)
    rng = random.Random(data_seed)
    for view, n in ROWS.items():
        labels = [rng.randrange(2) for _ in range(n)]
        ids = [f"d{data_seed}{view}{i}" for i in range(n)]
        for part, name in (("inputs", "x.csv"), ("labels", "y.csv")):
            (folder / "views" / view / part).mkdir(parents=True)
            text = "\n".join(f"{i},{y}" for i, y in zip(ids, labels, strict=True))
            (folder / "views" / view / part / name).write_text(text + "\n")
    return folder


def make_row_program(folder: Path, key: str, p: float) -> Path:
    folder.mkdir(parents=True)
    (folder / "run.py").write_text(ROW_PROGRAM)
    (folder / "behaviour.json").write_text(json.dumps({"key": key, "p": p}))
    return folder


RINGS_AT_ONCE = 3


@pytest.mark.e2e
def test_null_population_rarely_replaces_the_baseline(tmp_path):
    """8 candidates as good as the baseline, 10 rings on fresh data: at most 2 replaced."""
    cands = tmp_path / "cands"
    for i in range(8):
        make_row_program(cands / f"c{i}", f"c{i}", 0.9)
    base = make_row_program(tmp_path / "base" / "baseline", "base", 0.9)

    def start(ring: int) -> tuple[Path, subprocess.Popen]:
        # A folder of its own per ring: independent rings, run a few at a time (a ring
        # waits on its clock part of the time).
        work = tmp_path / f"w{ring}"
        task = make_row_task(work / "task", data_seed=ring)
        config = write_config(work, ring_id=f"null{ring}", task=str(task),
                              candidates=str(cands), baseline=str(base),
                              guard={"seeds": 2})  # fmt: skip
        argv = snakemake_argv(work, config)
        return work, subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True)  # fmt: skip

    decisions = []
    rings = list(range(10))
    while rings:
        batch = [start(ring) for ring in rings[:RINGS_AT_ONCE]]
        for ring, (work, proc) in zip(rings, batch, strict=False):
            said = proc.communicate(timeout=900)[0]
            assert proc.returncode == 0, said[-4000:]
            final = json.loads((work / "runs" / f"null{ring}" / "final" / "FINAL.json").read_text())
            assert final["guard"]["views"] == ["guard"] and final["finalists"]
            assert final["selection_gap"]["view"] == "final"
            decisions.append(final["decision"])
            # The scorer ran once for a search seed and twice for a guard run (its score,
            # then `--bootstrap B`): what the reserve prices a bootstrap from.
            nodes = work / "runs" / f"null{ring}" / "nodes"
            calls = {path.parent.parent.name + "/" + path.parent.name:
                     json.loads(path.read_text()).get("scorer_calls")
                     for path in nodes.glob("*/exec/*/*/score.json")}  # fmt: skip
            assert {c for run, c in calls.items() if run.startswith("proxy/s0")} == {1}, calls
            assert {c for run, c in calls.items() if run.startswith("guard/")} == {2}, calls
        rings = rings[RINGS_AT_ONCE:]
    assert len(decisions) == 10 and decisions.count("candidate") <= 2, decisions


@pytest.mark.e2e
def test_a_tiny_constant_advantage_with_a_seed_blind_scorer_is_not_chosen(tmp_path):
    task = make_task(tmp_path, roles={"search": ["proxy"], "guard": ["guard"], "final": "final"})
    make_candidate(tmp_path / "cands" / "tiny", mean=0.5 + 1e-9)
    base = make_candidate(tmp_path / "base" / "baseline", mean=0.5)
    config = write_config(tmp_path, ring_id="tiny", task=str(task),
                          candidates=str(tmp_path / "cands"), baseline=str(base))  # fmt: skip
    snakemake(tmp_path, config)
    final = json.loads((tmp_path / "runs" / "tiny" / "final" / "FINAL.json").read_text())
    assert final["decision"] == "baseline"
    assert "no spread" in final["reason"] and "ignores --seed" in final["reason"]
    assert final["guard"]["lcb"] is None and final["guard"]["bootstrap"]["spread"] == 0
    # The whole story, although the baseline was kept.
    row = final["finalists"][0]
    assert row["node"] == "n001-tiny" and row["promotion_mean"] == pytest.approx(0.5)
    assert row["guard_mean"] == pytest.approx(0.5) and row["shrinkage"] == pytest.approx(0)
    assert final["guard_mean"] == pytest.approx(0.5) and final["promotion_mean"] == 0.5
    assert final["selection_gap"]["gap"] is not None
    assert set(final["selection_gap"]["compared"]) == {"n000-baseline", "n001-tiny"}


@pytest.mark.e2e
def test_a_task_without_a_guard_view_says_the_guard_reused_search_rows(tmp_path):
    task = make_task(tmp_path)
    make_candidate(tmp_path / "cands" / "a", mean=0.8, sd=0.01)
    base = make_candidate(tmp_path / "base" / "baseline", mean=0.5, sd=0.01, noise_key="b")
    config = write_config(tmp_path, ring_id="reuse", task=str(task),
                          candidates=str(tmp_path / "cands"), baseline=str(base))  # fmt: skip
    snakemake(tmp_path, config)
    ring = tmp_path / "runs" / "reuse"
    final = json.loads((ring / "final" / "FINAL.json").read_text())
    assert final["guard_reused_search_rows"] is True
    assert final["guard"]["views"] == ["proxy", "x3"]
    assert "re-used the search views' rows" in final["warnings"][0]
    assert "re-used the search views" in (ring / "report.html").read_text()
