"""Whole rings through Snakemake: train once and replay, bad candidates, resumption, and
a second ring sharing the store (issue: the spine). Tests run in file order on one ring."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ringflow.weights.store import WeightsStore
from ringtools import make_candidate, make_task, results, snakemake, write_config

pytestmark = pytest.mark.e2e

GUARD = [3, 4, 5, 6, 7]


def spine_config(work: Path, ring_id: str) -> Path:
    # The ring's folder is named in full, so every rule's command carries the odd name.
    return write_config(work, ring_id=ring_id, runs_dir=str(work / "runs"),
                        task=str(work / "task"), candidates=str(work / "candidates"),
                        baseline=str(work / "baseline"), promote_top_k=2, final_top_k=1,
                        max_weights_gb=2e-6)  # fmt: skip


@pytest.fixture(scope="module")
def ring1(tmp_path_factory):
    # Every folder of the ring under a name a shell would read: the rules quote each path.
    work = tmp_path_factory.mktemp("spine") / "a ring's $HOME `id`"
    work.mkdir()
    make_task(work)
    cands = work / "candidates"
    make_candidate(cands / "steady", mean=0.9, sd=0.01, weights=True)
    make_candidate(cands / "seedy", mean=0.8, sd=0.01, weights=True, seed_affects_training=True)
    make_candidate(cands / "light", mean=0.7, sd=0.01)
    # Bad inputs of the candidate contract (docs/contracts.md#candidate), each with its own error.
    (cands / "no-program").mkdir()
    (cands / "no-program" / "notes.txt").write_text("nothing to run\n")
    make_candidate(cands / "bad-json", mean=0.9)
    (cands / "bad-json" / "EXECUTION.json").write_text("{not json")
    make_candidate(cands / "top-level", mean=0.9)
    (cands / "top-level" / "ARTIFACTS.json").write_text(
        json.dumps([{"path": "model.pkl", "per_view": True}])
    )
    make_candidate(cands / "escape", mean=0.9)
    os.symlink("/etc/passwd", cands / "escape" / "leak.txt")
    # A hard link to the labels: the import would copy them into the program's folder.
    make_candidate(cands / "hardlink", mean=0.9)
    os.link(work / "task" / "views" / "proxy" / "labels" / "truth.txt",
            cands / "hardlink" / "notes.txt")  # fmt: skip
    make_candidate(cands / "huge", mean=0.9)
    (cands / "huge" / "weights").mkdir()
    (cands / "huge" / "weights" / "big.bin").write_bytes(b"x" * 4096)
    (cands / "huge" / "ARTIFACTS.json").write_text(
        json.dumps([{"path": "weights/big.bin", "per_view": False}])
    )
    # Its own seed noise: with the candidates' noise the guard's differences would be
    # constant, and a bootstrap without spread never passes.
    make_candidate(work / "baseline", mean=0.5, sd=0.01, noise_key="baseline")
    config = spine_config(work, "r1")
    snakemake(work, config)
    return work, config, work / "runs" / "r1"


def _node(ring: Path, name: str) -> str:
    index = json.loads((ring / "nodes" / "index.json").read_text())
    return next(n["id"] for n in index["nodes"] if n["name"] == name)


def test_trains_once_per_key_and_replays_the_rest(ring1):
    _, _, ring = ring1
    res = results(ring)
    steady = _node(ring, "steady")
    for view in ("proxy", "x3"):
        modes = {
            v: res[(steady, view, v)]["weights_mode"]
            for v in ["s0", "s1", "s2", *(f"g{s}" for s in GUARD)]
        }
        assert modes.pop("s0") == "train"
        assert set(modes.values()) == {"replay"}, modes
        # The ablation control trains its own weights under its own key.
        ablate = res[(steady, view, "s0-ablate")]
        assert ablate["weights_mode"] == "train"
        assert ablate["weights_key"] != res[(steady, view, "s0")]["weights_key"]
    trained_keys = [r["weights_key"] for r in res.values() if r["weights_mode"] == "train"]
    assert len(trained_keys) == len(set(trained_keys)), "a key was trained twice"


def test_seed_affects_training_trains_once_per_seed(ring1):
    _, _, ring = ring1
    res = results(ring)
    seedy = _node(ring, "seedy")
    for view in ("proxy", "x3"):
        runs = [res[(seedy, view, v)] for v in ("s0", "s1", "s2")]
        assert [r["weights_mode"] for r in runs] == ["train"] * 3
        assert len({r["weights_key"] for r in runs}) == 3


def test_results_record_the_contract_fields(ring1):
    _, _, ring = ring1
    result = results(ring)[(_node(ring, "light"), "proxy", "s0")]
    for field in (
        "status",
        "budget_cut",
        "exit_code",
        "wall_s",
        "cpu_s",
        "weights_mode",
        "weights_key",
        "reap_left",
    ):
        assert field in result
    assert result["status"] == "ok" and result["weights_mode"] == "none"
    exec_dir = ring / "nodes" / _node(ring, "light") / "exec" / "proxy" / "s0"
    assert (exec_dir / "stdout.log").exists() and (exec_dir / "stderr.log").exists()
    assert json.loads((exec_dir / "score.json").read_text())["score"] == pytest.approx(
        0.7, abs=0.05
    )
    assert json.loads((exec_dir / "output" / "score.json").read_text())
    # None of these programs leaves its session: a daemon's record would be a false one.
    assert not [r for r in results(ring).values()
                if any(e["event"] == "own_session" for e in r.get("events") or [])]  # fmt: skip


@pytest.mark.parametrize(
    "name, message",
    [
        ("no-program", "missing program"),
        ("bad-json", "malformed JSON"),
        ("top-level", "top-level file"),
        ("escape", "leaves the solution tree"),
        ("hardlink", "notes.txt is the task's file views/proxy/labels/truth.txt (a hard link)"),
        ("huge", "over the limit"),
    ],
)
def test_bad_candidates_are_rejected_with_their_error(ring1, name, message):
    _, _, ring = ring1
    node = json.loads((ring / "nodes" / _node(ring, name) / "node.json").read_text())
    assert node["status"] == "rejected"
    assert message in node["error"]
    events = [json.loads(line) for line in (ring / "events.jsonl").read_text().splitlines()]
    assert any(e["kind"] == "candidate_rejected" and e["node"] == node["id"] for e in events)
    assert not (ring / "nodes" / node["id"] / "exec").exists()


def test_node_ids_keep_the_candidate_folder_name(ring1):
    _, _, ring = ring1
    index = json.loads((ring / "nodes" / "index.json").read_text())
    assert index["baseline"] == "n000-baseline"
    assert all(n["id"].endswith("-" + n["name"]) for n in index["nodes"])


def test_the_good_candidates_finish_and_final_is_written(ring1):
    _, _, ring = ring1
    final = json.loads((ring / "final" / "FINAL.json").read_text())
    assert final["decision"] == "candidate" and final["chosen"] == _node(ring, "steady")
    assert (ring / "final" / "solution" / "run.py").exists()
    assert subprocess.run([sys.executable, "-m", "ringflow", "verify", str(ring)]).returncode == 0


def test_the_summary_names_the_decision_and_each_nodes_runs(ring1):
    _, _, ring = ring1
    summary = (ring / "summary.txt").read_text()
    assert "final decision: candidate -> " + _node(ring, "steady") in summary
    line = next(x for x in summary.splitlines() if x.startswith(_node(ring, "no-program")))
    assert "rejected" in line and " 0/0 " in line


def test_key_explain_lists_every_component(ring1):
    _, _, ring = ring1
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "ringflow",
            "key",
            str(ring),
            _node(ring, "steady"),
            "proxy",
            "s1",
            "--explain",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for component in ("tree_hash", "train_seed", "view_hash", "env_key", "train_args"):
        assert component in out


def test_rerunning_a_finished_ring_runs_nothing(ring1):
    work, config, _ = ring1
    proc = snakemake(work, config)
    assert "Nothing to be done" in proc.stdout + proc.stderr


def test_deleting_a_result_reruns_only_that_execution_in_replay_mode(ring1):
    work, config, ring = ring1
    steady = _node(ring, "steady")
    target = ring / "nodes" / steady / "exec" / "proxy" / "s0" / "result.json"
    before = {k: v["ended_at"] for k, v in results(ring).items()}
    target.unlink()
    time.sleep(1)
    snakemake(work, config)
    after = results(ring)
    rerun = [k for k, v in after.items() if v["ended_at"] != before[k]]
    assert rerun == [(steady, "proxy", "s0")]
    assert after[(steady, "proxy", "s0")]["weights_mode"] == "replay"


def test_a_second_ring_sharing_the_store_replays_what_the_first_registered(ring1):
    work, _, ring = ring1
    registered = {r["weights_key"] for r in results(ring).values() if r["weights_mode"] == "train"}
    snakemake(work, spine_config(work, "r2"))
    res2 = results(work / "runs" / "r2")
    shared = [r for r in res2.values() if r["weights_key"] in registered]
    assert shared, "the second ring shares no key with the first"
    assert {r["weights_mode"] for r in shared} == {"replay"}
    index2 = json.loads((work / "runs" / "r2" / "nodes" / "index.json").read_text())
    assert all(index2["keys"][k]["in_store"] for k in registered if k in index2["keys"])


@pytest.mark.parametrize("damage", ["delete", "alter"])
def test_a_damaged_object_interrupts_the_replay_and_fails_verify(ring1, damage):
    work, config, ring = ring1
    steady = _node(ring, "steady")
    s1 = results(ring)[(steady, "x3", "s1")]
    store = work / "store"
    entry = json.loads(next(store.glob(f"per_view/*/{s1['weights_key']}.json")).read_text())
    obj = store / "objects" / entry["files"][0]["sha256"]
    intact = obj.read_bytes()
    if damage == "delete":
        obj.unlink()
    else:
        data = bytearray(obj.read_bytes())
        data[0] ^= 1
        os.chmod(obj, 0o644)
        obj.write_bytes(bytes(data))
    (ring / "nodes" / steady / "exec" / "x3" / "s1" / "result.json").unlink()
    snakemake(work, config)
    redo = results(ring)[(steady, "x3", "s1")]
    assert redo["status"] == "interrupted" and not redo["budget_cut"]
    assert "weights/model.txt" in redo["reason"]
    assert redo["weights_mode"] == "replay"
    verify = subprocess.run(
        [sys.executable, "-m", "ringflow", "verify", str(ring)], capture_output=True, text=True
    )
    assert verify.returncode == 1 and entry["files"][0]["sha256"] in verify.stdout
    # Put the object back for the next parametrisation.
    obj.unlink(missing_ok=True)
    obj.write_bytes(intact)
    os.chmod(obj, 0o444)
    assert WeightsStore(store).verify() == []
