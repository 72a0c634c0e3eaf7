"""Weights you can trust, with real programs: executions through `ringflow step execute` as a rule
runs them, and two whole rings on one store with one damaged object."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from filelock import FileLock

from ringflow.weights.store import WeightsStore
from ringtools import locked_ring, make_candidate, make_task, results, snakemake, write_config

pytestmark = pytest.mark.e2e

# Trains when weights/model.txt is absent, from the training seed it is told; can crash
# while training, write undeclared files, and records the arguments it was given.
TRAINER = """\
import argparse, json, os, sys
p = argparse.ArgumentParser()
p.add_argument("--seed", type=int, default=0)
p.add_argument("--ablate", action="store_true")
if os.path.exists("TAKES_TRAIN_SEED"):
    p.add_argument("--train-seed", type=int)
a = p.parse_args()  # strict: an unknown argument is an error
b = json.load(open("behaviour.json"))
out = os.environ["RINGFLOW_OUTPUT_DIR"]
if not os.path.exists("weights/model.txt"):
    if b.get("crash_training") or a.seed in b.get("crash_seeds", []):
        sys.exit("training crashes on purpose")
    with open("weights/model.txt", "w") as f:
        f.write("train_seed=%s\\n" % os.environ["RINGFLOW_TRAIN_SEED"])
    if b.get("undeclared"):
        open("weights/optimizer.bin", "w").write("state")
json.dump({"value": 0.5, "argv": sys.argv[1:], "train_seed": os.environ["RINGFLOW_TRAIN_SEED"],
           "sees_method": os.path.exists("METHOD.md")}, open(os.path.join(out, "score.json"), "w"))
"""


def trainer(cands: Path, name: str, **behaviour) -> Path:
    folder = make_candidate(cands / name, mean=0.5, weights=True, **behaviour)
    (folder / "run.py").write_text(TRAINER)
    return folder


def execute(ring: Path, node: str, view: str, variant: str, timeout: float = 120) -> dict:
    argv = [sys.executable, "-m", "ringflow", "step", "execute", str(ring), node, view, variant]
    subprocess.run(argv, check=True, capture_output=True, timeout=timeout)
    return json.loads((ring / "nodes" / node / "exec" / view / variant / "result.json").read_text())


def outputs(ring: Path, node: str, view: str, variant: str) -> dict:
    path = ring / "nodes" / node / "exec" / view / variant / "output" / "score.json"
    return json.loads(path.read_text())


def object_inodes(store: Path) -> set[tuple[int, int]]:
    return {(p.stat().st_dev, p.stat().st_ino) for p in (store / "objects").iterdir()}


# ---- defect 4: no hard link to a store object outlives its execution


def test_a_replay_leaves_no_hard_link_to_the_store_in_the_ring(tmp_path):
    trainer(tmp_path / "cands", "a")
    ring = locked_ring(tmp_path, tmp_path / "cands", "r1")
    assert execute(ring, "n001-a", "proxy", "s0")["weights_mode"] == "train"
    replay = execute(ring, "n001-a", "proxy", "s1")
    assert (replay["status"], replay["weights_mode"]) == ("ok", "replay")
    inodes = object_inodes(tmp_path / "store")
    assert inodes
    for path in ring.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert (path.stat().st_dev, path.stat().st_ino) not in inodes, path
    # So nothing written in the ring folder can reach the store: the key still replays.
    assert execute(ring, "n001-a", "proxy", "s2")["status"] == "ok"
    # Every result anchors the ledger head it saw.
    head = replay["ledger_head"]
    lines = (ring / "ledger.jsonl").read_text().splitlines()
    assert json.loads(lines[head["seq"] - 1])["hash"] == head["hash"]


# ---- defect 5: a failed trainer is retried once; the program is told its training seed


def test_a_crashed_trainer_is_retried_once_with_the_same_training_seed(tmp_path):
    trainer(tmp_path / "cands", "a", crash_seeds=[0])
    ring = locked_ring(tmp_path, tmp_path / "cands", "r1")
    first = execute(ring, "n001-a", "proxy", "s0")
    assert (first["status"], first["weights_mode"]) == ("crash", "train")
    second = execute(ring, "n001-a", "proxy", "s1")
    assert (second["status"], second["weights_mode"]) == ("ok", "train")
    # Trained by seed 1's run, but from the node's training seed 0: the same weights
    # whichever execution trains them.
    store = WeightsStore(tmp_path / "store")
    entry = store.find(second["weights_key"])
    assert entry["who"]["execution"] == "proxy/s1"
    assert (store.objects / entry["files"][0]["sha256"]).read_text() == "train_seed=0\n"
    assert outputs(ring, "n001-a", "proxy", "s1")["argv"] == ["--seed", "1"]
    assert execute(ring, "n001-a", "proxy", "s2")["weights_mode"] == "replay"


def test_after_max_train_attempts_the_others_are_skipped_at_once(tmp_path):
    trainer(tmp_path / "cands", "a", crash_training=True)
    ring = locked_ring(tmp_path, tmp_path / "cands", "r1")
    assert execute(ring, "n001-a", "proxy", "s0")["status"] == "crash"
    assert execute(ring, "n001-a", "proxy", "s1")["status"] == "crash"
    key = json.loads((ring / "nodes" / "n001-a" / "node.json").read_text())["executions"]["proxy"][
        "s2"
    ]["key"]
    # Even with the key's lock held elsewhere, the slot is freed at once, not after a wait.
    with FileLock(str(tmp_path / "store" / "locks" / f"{key}.lock")):
        started = time.monotonic()
        skipped = execute(ring, "n001-a", "proxy", "s2", timeout=60)
        assert time.monotonic() - started < 30
    assert skipped["status"] == "skipped" and skipped["reason"].startswith("key_failed")
    assert "proxy/s0" in skipped["reason"] and "proxy/s1" in skipped["reason"]
    assert execute(ring, "n001-a", "proxy", "g3")["status"] == "skipped"
    attempts = (ring / "keys" / "attempts" / f"{key}.jsonl").read_text().splitlines()
    assert sum(json.loads(line)["event"] == "started" for line in attempts) == 2
    score = json.loads((ring / "nodes" / "n001-a" / "exec" / "proxy" / "s2" / "score.json")
                       .read_text())  # fmt: skip
    assert score["score"] is None and "skipped" in score["reason"]


def test_train_seed_is_an_argument_only_when_execution_json_asks(tmp_path):
    cands = tmp_path / "cands"
    trainer(cands, "plain", seed_affects_training=True)
    asks = trainer(cands, "asks", seed_affects_training=True)
    (asks / "TAKES_TRAIN_SEED").write_text("")
    spec = json.loads((asks / "EXECUTION.json").read_text())
    (asks / "EXECUTION.json").write_text(json.dumps({**spec, "train_seed_arg": True}))
    ring = locked_ring(tmp_path, cands, "r1")
    assert execute(ring, "n002-plain", "proxy", "s1")["status"] == "ok"
    plain = outputs(ring, "n002-plain", "proxy", "s1")
    assert (plain["argv"], plain["train_seed"]) == (["--seed", "1"], "1")
    assert execute(ring, "n001-asks", "proxy", "s1")["status"] == "ok"
    assert outputs(ring, "n001-asks", "proxy", "s1")["argv"] == ["--seed", "1", "--train-seed", "1"]


def test_a_bad_train_seed_arg_rejects_the_candidate(tmp_path):
    cands = tmp_path / "cands"
    bad = trainer(cands, "bad")
    (bad / "EXECUTION.json").write_text(json.dumps({"train_seed_arg": "yes"}))
    ring = locked_ring(tmp_path, cands, "r1")
    node = json.loads((ring / "nodes" / "n001-bad" / "node.json").read_text())
    assert (
        node["status"] == "rejected" and "'train_seed_arg' must be true or false" in (node["error"])
    )


# ---- defect 3: documentation left out of the key is left out of the program's reach


def test_files_the_config_ignores_are_not_in_the_working_copy(tmp_path):
    cands = tmp_path / "cands"
    (trainer(cands, "a") / "METHOD.md").write_text("notes\n")
    plain = locked_ring(tmp_path, cands, "r1")
    assert execute(plain, "n001-a", "proxy", "s0")["status"] == "ok"
    assert outputs(plain, "n001-a", "proxy", "s0")["sees_method"] is True
    ignoring = locked_ring(tmp_path, cands, "r2", tree_ignore=["METHOD.md"])
    assert execute(ignoring, "n001-a", "proxy", "s0")["status"] == "ok"
    assert outputs(ignoring, "n001-a", "proxy", "s0")["sees_method"] is False
    # The node keeps its notes; only the program's working copy goes without them.
    assert (ignoring / "nodes" / "n001-a" / "solution" / "METHOD.md").exists()


# ---- defect 6: a replay sees what training saw


def test_a_trainer_writing_undeclared_weights_is_not_registered(tmp_path):
    trainer(tmp_path / "cands", "a", undeclared=True)
    ring = locked_ring(tmp_path, tmp_path / "cands", "r1")
    result = execute(ring, "n001-a", "proxy", "s0")
    assert result["status"] == "crash"
    assert "undeclared" in result["reason"] and "weights/optimizer.bin" in result["reason"]
    assert WeightsStore(tmp_path / "store").find(result["weights_key"]) is None


# ---- two rings on one store with one damaged object


def test_two_rings_one_damaged_object_check_repair_and_the_key_trains_once(tmp_path):
    make_task(tmp_path)
    cands = tmp_path / "cands"
    make_candidate(cands / "steady", mean=0.9, sd=0.01, weights=True)
    make_candidate(cands / "light", mean=0.7, sd=0.01)

    # No baseline and the guard off: a refused guard would start no promotion seeds.
    def ring_config(ring_id: str) -> Path:
        return write_config(tmp_path, ring_id=ring_id, task=str(tmp_path / "task"),
                            candidates=str(cands), baseline=None, promote_top_k=2,
                            guard={"enabled": False})  # fmt: skip

    snakemake(tmp_path, ring_config("r1"))
    r1 = tmp_path / "runs" / "r1"
    first = results(r1)
    node = "n002-steady"
    damaged_key = first[(node, "proxy", "s0")]["weights_key"]
    store = WeightsStore(tmp_path / "store")
    obj = store.objects / store.find(damaged_key)["files"][0]["sha256"]
    # A root process writing into what once was a replay's folder: here, straight into it.
    os.chmod(obj, 0o644)
    obj.write_text("damaged\n")

    run = [sys.executable, "-m", "ringflow", "store"]
    check = subprocess.run([*run, "check", str(r1)], capture_output=True, text=True)
    assert check.returncode == 1 and obj.name in check.stdout and damaged_key in check.stdout
    repair = subprocess.run([*run, "repair", str(r1)], capture_output=True, text=True)
    assert repair.returncode == 0, repair.stdout + repair.stderr
    assert f"quarantined key {damaged_key}" in repair.stdout
    assert list((tmp_path / "store" / "quarantine").glob(f"*/objects/{obj.name}"))
    ledger = [json.loads(x) for x in (r1 / "ledger.jsonl").read_text().splitlines()]
    assert [r["key"] for r in ledger if r["kind"] == "weights_quarantined"] == [damaged_key]

    snakemake(tmp_path, ring_config("r2"))
    second = results(tmp_path / "runs" / "r2")
    keyed = {k: r for k, r in second.items() if r["weights_mode"] in ("train", "replay")}
    trainings = sorted(k for k, r in keyed.items() if r["weights_mode"] == "train")
    assert trainings == [(node, "proxy", "s0")]
    assert second[(node, "proxy", "s0")]["weights_key"] == damaged_key
    assert all(r["status"] == "ok" for r in keyed.values()), keyed
    assert len(keyed) > 4  # s1, s2 and the other view replay
    r2 = str(tmp_path / "runs" / "r2")
    verify = subprocess.run([sys.executable, "-m", "ringflow", "verify", r2],
                            capture_output=True, text=True)  # fmt: skip
    assert verify.returncode == 0, verify.stdout
    again = subprocess.run([*run, "check", r2], capture_output=True, text=True)
    assert again.returncode == 0, again.stdout
