"""Chained rings and comparability (docs/operations.md#chains), run for real.

Ring a scores four candidates and promotes two. Ring b continues it with the same
evaluation spec: the scores are comparable, nothing of a's is executed again, its
promotion seeds included; imported nodes are the lottery's parents and are promoted on
their imported scores. Ring b2 continues a with another time limit (another evaluation
spec): a's scores are history and only the top `continue_rescore_top_k` are re-executed,
on seed 0, as b2's own executions.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ringflow.core.reserve import CutoffFile
from ringflow.reporting.progress import snapshot
from ringflow.verify import verify_ring
from ringtools import make_candidate, make_task, snakemake, snakemake_argv, write_config

pytestmark = pytest.mark.e2e

MEANS = {"alpha": 0.9, "beta": 0.7, "delta": 0.3, "gamma": 0.5}
VIEWS = ("proxy", "x3")
# No baseline and no guard: the top finalist is chosen; promotion seeds still run.
SHORT = {"baseline": None, "guard": {"enabled": False, "seeds": 2, "alpha": 0.05,
                                     "margin": 0.0, "bootstrap": 20},
         "promote_top_k": 2, "final_top_k": 1}  # fmt: skip


def read(path: Path):
    return json.loads(path.read_text())


def runs_of(ring: Path) -> set[tuple[str, str, str]]:
    return {
        (p.parts[-5], p.parts[-3], p.parts[-2]) for p in ring.glob("nodes/*/exec/*/*/result.json")
    }


def names(ring: Path) -> dict[str, dict]:
    index = read(ring / "nodes" / "index.json")
    return {n["name"]: {**read(ring / "nodes" / n["id"] / "node.json"), "index": n}
            for n in index["nodes"]}  # fmt: skip


@pytest.fixture(scope="module")
def ring_a(tmp_path_factory):
    work = tmp_path_factory.mktemp("chain")
    task = make_task(work)
    for name, mean in MEANS.items():
        make_candidate(work / "cands" / name, mean=mean, label=name)
    config = write_config(work, ring_id="a", task=str(task), candidates=str(work / "cands"),
                          **SHORT)  # fmt: skip
    snakemake(work, config)
    ring = work / "runs" / "a"
    promoted = read(ring / "selection" / "promotion.json")["promoted"]
    assert [read(ring / "nodes" / n / "node.json")["name"] for n in promoted] == ["alpha", "beta"]
    return work


def test_an_unchanged_spec_imports_comparable_scores_and_executes_none_of_them(ring_a):
    work = ring_a
    a = work / "runs" / "a"
    # An engineer whose change makes its parent worse: one improvement (the four imported
    # nodes b's candidates folder holds count against max_nodes), then the search ends.
    engineer = {"command": "sed -i 's/\"mean\": [0-9.]*/\"mean\": 0.1/' behaviour.json; "
                           "echo 'a worse idea' > METHOD.md",
                "builtin_delay_s": 0, "network": False, "env_pass": [], "mounts": [],
                "stall_min": 30, "template": None}  # fmt: skip
    search = {"max_nodes": 5, "max_concurrent_nodes": 1, "draft_fraction": 0.0,
              "feedback": "blind", "queries_per_node": 0}  # fmt: skip
    config = write_config(work, ring_id="b", continue_from="runs/a", engineer=engineer,
                          search=search)  # fmt: skip
    snakemake(work, config)
    b = work / "runs" / "b"
    assert read(b / "RING.json")["search_hash"] == read(a / "RING.json")["search_hash"]
    imported = read(b / "carryover" / "imported.json")
    assert imported["comparability"]["comparable"] is True and imported["rescore"] == []
    # a ran alpha on the final view: that score is never imported.
    assert (a / "nodes" / "n001-alpha" / "exec" / "final" / "s0" / "score.json").is_file()
    for entry in imported["scored"]:
        assert set(entry["scores"]) == set(VIEWS)
        assert all(set(v) <= {"s0", "s1", "s2"} for v in entry["scores"].values())
    assert set(imported["scored"][0]["scores"]["proxy"]) == {"s0", "s1", "s2"}  # promoted
    nodes = names(b)
    ids = {name: nodes[name]["id"] for name in MEANS}
    for name in MEANS:
        assert nodes[name]["origin"]["kind"] == "imported" and nodes[name]["status"] == "ready"
    # Nothing of a's is executed again: not seed 0, not the ablation, not promotion seeds.
    (engineered,) = [n for n in nodes.values() if n["origin"]["kind"] == "improve"]
    ran = runs_of(b)
    assert {node for node, _, _ in ran} <= {engineered["id"]} | {ids["alpha"]}
    assert {(v, x) for node, v, x in ran if node == ids["alpha"]} <= {("final", "s0")}
    # Parents for the search: the lottery drew among the imported nodes, by their scores.
    lottery = read(b / "search" / "gen-0.json")["lottery"]
    assert [(row["node"], row["score"]) for row in lottery] == [
        (ids[n], MEANS[n]) for n in ("alpha", "beta", "gamma", "delta")
    ]
    assert engineered["parent"] in ids.values()
    # The improvement is this ring's own work, ranked against the imported scores.
    ranked = {row["node"]: row["score"] for row in read(b / "selection" / "promotion.json")[
        "ranked_by_seed0"]}  # fmt: skip
    assert ranked == {**{ids[n]: MEANS[n] for n in MEANS}, engineered["id"]: 0.1}
    # Candidates for promotion on their imported scores, a's promotion seeds included.
    promotion = read(b / "selection" / "promotion.json")
    assert promotion["promoted"] == [ids["alpha"], ids["beta"]]
    ranking = read(b / "selection" / "ranking.json")
    assert [row["node"] for row in ranking["ranked"]] == [ids["alpha"], ids["beta"]]
    assert ranking["ranked"][0]["score"] == pytest.approx(MEANS["alpha"])
    assert read(b / "final" / "FINAL.json")["chosen"] == ids["alpha"]
    assert read(b / "stop_manifest.json")["rescore_obligations"] == []
    # The progress line plans no run for the imported nodes: every planned run is done.
    progress = snapshot(b)
    assert progress["done"] == progress["total"] == len(ran)
    assert verify_ring(b) == []


def test_a_changed_spec_rescores_only_the_top_k_as_this_rings_executions(ring_a):
    work = ring_a
    a = work / "runs" / "a"
    # Another time limit: another evaluation spec, so a's scores are not comparable. A new
    # candidate beside a's four: new work, served after the rescores.
    cands = work / "cands-b2"
    shutil.copytree(work / "cands", cands)
    make_candidate(cands / "epsilon", mean=0.8)
    config = write_config(work, ring_id="b2", continue_from="runs/a", continue_rescore_top_k=2,
                          candidates=str(cands),
                          limits={"memory_gb": 4, "time_limit_min": 9, "threads": 1})  # fmt: skip
    snakemake(work, config)
    b2 = work / "runs" / "b2"
    lock = read(b2 / "RING.json")
    assert lock["search_hash"] != read(a / "RING.json")["search_hash"]
    assert lock["chain"]["changed"]["limits.time_limit_min"] == {"parent": 10, "this": 9}
    imported = read(b2 / "carryover" / "imported.json")
    assert imported["comparability"]["comparable"] is False
    nodes = names(b2)
    assert imported["rescore"] == [nodes[n]["imported"]["identity"] for n in ("alpha", "beta")]
    # Only the top 2 by old score are re-executed: seed 0 on every search view, nothing else
    # in the search; gamma and delta are history, never executed.
    rescored = {(nodes[n]["id"], v, "s0") for n in ("alpha", "beta") for v in VIEWS}
    new_work = {(nodes["epsilon"]["id"], v, x) for v in VIEWS for x in ("s0", "s0-ablate")}
    search_runs = {(n, v, x) for n, v, x in runs_of(b2) if x in ("s0", "s0-ablate") and v in VIEWS}
    assert search_runs == rescored | new_work
    assert nodes["epsilon"]["origin"]["kind"] == "static"
    started = {run: read(b2 / "nodes" / run[0] / "exec" / run[1] / run[2] / "result.json")[
        "started_at"] for run in search_runs}  # fmt: skip
    assert max(started[r] for r in rescored) <= min(started[r] for r in new_work)
    for name in ("gamma", "delta"):
        assert nodes[name]["status"] == "history"
        assert not (b2 / "nodes" / nodes[name]["id"] / "exec").exists()
    # The rescored nodes are ranked on b2's own scores; the history is not ranked at all.
    promotion = read(b2 / "selection" / "promotion.json")
    ranked = [(row["node"], row["score"]) for row in promotion["ranked_by_seed0"]]
    assert ranked == [(nodes["alpha"]["id"], MEANS["alpha"]), (nodes["epsilon"]["id"], 0.8),
                      (nodes["beta"]["id"], MEANS["beta"])]  # fmt: skip
    # b2's promotion seeds ran here: a's were made under another spec.
    for name in ("alpha", "epsilon"):
        for view in VIEWS:
            for variant in ("s1", "s2"):
                assert (nodes[name]["id"], view, variant) in runs_of(b2)
    assert read(b2 / "stop_manifest.json")["rescore_obligations"] == []
    summary = (b2 / "summary.txt").read_text()
    assert ("scores in: 4 scored node(s) of the parent (another search_hash): 0 comparable, "
            "2 rescored, 2 history") in summary  # fmt: skip
    assert verify_ring(b2) == []


# Scores at once with one thread; with two (another evaluation spec) it runs until stopped.
SLEEPY = """\
import json, os, signal, sys, time
if os.environ.get("OMP_NUM_THREADS") == "2":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    time.sleep(600)
with open(os.path.join(os.environ["RINGFLOW_OUTPUT_DIR"], "score.json"), "w") as f:
    json.dump({"value": 0.9}, f)
"""
TWO_THREADS = {"memory_gb": 4, "time_limit_min": 10, "threads": 2}


def run_and_cut_rescore(work: Path, config: Path, ring: Path, node: str) -> None:
    """Run the ring; once the rescore's seed 0 runs on a search view, move the cutoff to
    now. The ring must then end by itself."""
    proc = subprocess.Popen(snakemake_argv(work, config), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        end = time.monotonic() + 240
        health = [ring / "nodes" / node / "exec" / v / "s0" / "health" / "health_latest.json"
                  for v in VIEWS]  # fmt: skip
        while not any(p.exists() for p in health):
            assert proc.poll() is None, f"the ring ended before {node} was rescored"
            assert time.monotonic() < end, f"{node} was never rescored"
            time.sleep(0.5)
        time.sleep(1)
        CutoffFile(ring / "cutoff.json").move_earlier(time.time(), why="test")
        assert proc.wait(timeout=300) == 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def test_a_rescore_cut_by_the_cutoff_is_re_executed_by_the_next_ring(tmp_path):
    task = make_task(tmp_path)
    (tmp_path / "cands" / "sleepy").mkdir(parents=True)
    (tmp_path / "cands" / "sleepy" / "run.py").write_text(SLEEPY)
    make_candidate(tmp_path / "cands" / "fast", mean=0.5)
    runs = tmp_path / "runs"
    snakemake(tmp_path, write_config(tmp_path, ring_id="s", task=str(task),
                                     candidates=str(tmp_path / "cands"), **SHORT))  # fmt: skip
    # t: two threads per execution (another spec); only sleepy, the best, is rescored, and
    # the cutoff cuts it.
    config_t = write_config(tmp_path, ring_id="t", continue_from="runs/s", limits=TWO_THREADS,
                            continue_rescore_top_k=1)  # fmt: skip
    run_and_cut_rescore(tmp_path, config_t, runs / "t", "n002-sleepy")
    t = runs / "t"
    nodes_t = names(t)
    assert nodes_t["sleepy"]["id"] == "n002-sleepy" and nodes_t["fast"]["status"] == "history"
    (owed,) = read(t / "stop_manifest.json")["rescore_obligations"]
    assert owed["identity"] == "s#n002-sleepy" and owed["node"] == "n002-sleepy"
    assert "rescores owed: 1 cut by the cutoff" in (t / "summary.txt").read_text()
    # Not sealed as carried work: it is an obligation, not a resume.
    assert read(t / "stop_manifest.json")["seals"] == []
    assert verify_ring(t) == []
    # u keeps t's spec and rescores no top-k of its own: it re-executes the obligation.
    config_u = write_config(tmp_path, ring_id="u", continue_from="runs/t", limits=TWO_THREADS,
                            continue_rescore_top_k=0)  # fmt: skip
    u = runs / "u"
    run_and_cut_rescore(tmp_path, config_u, u, "n002-sleepy")
    imported = read(u / "carryover" / "imported.json")
    assert imported["comparability"]["comparable"] is True
    assert imported["obligations_inherited"] == ["s#n002-sleepy"]
    assert imported["rescore"] == ["s#n002-sleepy"]
    nodes_u = names(u)
    assert nodes_u["sleepy"]["index"]["rescore"] is True
    assert nodes_u["fast"]["status"] == "history"
    assert {(n, x) for n, _, x in runs_of(u)} == {("n002-sleepy", "s0")}
    # Cut again: still owed, to the ring after u.
    (owed_u,) = read(u / "stop_manifest.json")["rescore_obligations"]
    assert owed_u["identity"] == "s#n002-sleepy"
    assert verify_ring(u) == []
