"""Three chained rings (issue: carryover and chained rings), execution kind.

Ring a: a slow program's seed-0 run is cut at the cutoff and sealed. Ring b continues a:
its guard seeds are new, the seal verifies, the work is resumed before any new node, cut
again and sealed again. Ring c continues b with max_resume_per_ring 2: only b's re-carried
work is resumed (a's, reached again through b, is not), with both earlier segments.
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

from ringflow.carryover.seal import STOP_ENV, seal_problems
from ringflow.core.reserve import CutoffFile
from ringflow.verify import verify_ring
from ringtools import make_candidate, make_task, snakemake, snakemake_argv, write_config

pytestmark = pytest.mark.e2e

# Seed 0 on the proxy view runs until the cutoff stops it, writing a checkpoint in its
# grace; every other run scores at once.
SLOW = """\
import argparse, json, os, pathlib, signal, sys, time
p = argparse.ArgumentParser()
p.add_argument("--seed", type=int)
p.add_argument("--ablate", action="store_true")
a = p.parse_args()
inputs = pathlib.Path(os.environ["RINGFLOW_INPUT_DIR"])
out = pathlib.Path(os.environ["RINGFLOW_OUTPUT_DIR"])
if a.seed == 0 and not a.ablate and "proxy" in (inputs / "data.txt").read_text():
    def stop(signum, frame):
        pathlib.Path("weights/ckpt.txt").write_text("epoch 3 of 10\\n")
        sys.exit(143)
    signal.signal(signal.SIGTERM, stop)
    time.sleep(600)
if not pathlib.Path("weights/model.txt").exists():
    pathlib.Path("weights/model.txt").write_text("trained\\n")
(out / "score.json").write_text(json.dumps({"value": 0.4}))
"""

VIEWS = ("proxy", "x3")
SEARCH = [(view, variant) for view in VIEWS for variant in ("s0", "s0-ablate")]


def slow_candidate(folder: Path) -> None:
    folder.mkdir(parents=True)
    (folder / "run.py").write_text(SLOW)
    (folder / "ARTIFACTS.json").write_text(json.dumps([{"path": "weights/model.txt",
                                                        "per_view": True}]))  # fmt: skip


def read(path: Path):
    return json.loads(path.read_text())


def result(ring: Path, node: str, view: str, variant: str) -> Path:
    return ring / "nodes" / node / "exec" / view / variant / "result.json"


def run_ring_and_cut(work: Path, config: Path, ring: Path, slow: str, others: list[str],
                     env: dict | None = None, exit_code: int = 0) -> None:  # fmt: skip
    """Run the ring; once every search run but the slow node's proxy seed 0 has ended and
    that one is running, move the cutoff to now. The ring must then end by itself."""
    log_path = work / f"{ring.name}.log"
    running = ring / "nodes" / slow / "exec" / "proxy" / "s0" / "health" / "health_latest.json"
    rest = [result(ring, slow, v, x) for v, x in SEARCH if (v, x) != ("proxy", "s0")]
    rest += [result(ring, node, v, x) for node in others for v, x in SEARCH]
    with open(log_path, "w") as log:
        proc = subprocess.Popen(snakemake_argv(work, config), stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                env=env)  # fmt: skip
        try:
            end = time.monotonic() + 240
            while not (running.exists() and all(p.exists() for p in rest)):
                assert proc.poll() is None, log_path.read_text()[-4000:]
                assert time.monotonic() < end, "the search did not reach the slow run alone"
                time.sleep(0.5)
            CutoffFile(ring / "cutoff.json").move_earlier(time.time(), why="test")
            code = proc.wait(timeout=300)
            assert (code == 0) == (exit_code == 0), log_path.read_text()[-4000:]
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)


def sealed_node(ring: Path, node: str) -> dict:
    node_json = read(ring / "nodes" / node / "node.json")
    assert node_json["status"] == "carried_over", node_json
    snapshot = ring / "nodes" / node / "carryover"
    seal = read(snapshot / "SEAL.json")
    assert seal_problems(snapshot, seal) == []
    assert (snapshot / "checkpoint/proxy/s0/solution/weights/ckpt.txt").read_text() == (
        "epoch 3 of 10\n"
    )
    return node_json


def test_three_rings_carry_and_resume_cut_work_once(tmp_path):
    task = make_task(tmp_path)
    slow_candidate(tmp_path / "cands-a" / "slow")
    cands_b = tmp_path / "cands-b"
    shutil.copytree(tmp_path / "cands-a" / "slow", cands_b / "slow")
    make_candidate(cands_b / "fresh", mean=0.6)
    runs = tmp_path / "runs"

    # Ring a: the slow program is cut at the cutoff and sealed.
    config_a = write_config(tmp_path, ring_id="a", task=str(task),
                            candidates=str(tmp_path / "cands-a"), baseline=None)  # fmt: skip
    run_ring_and_cut(tmp_path, config_a, runs / "a", "n001-slow", [])
    a = runs / "a"
    sealed_node(a, "n001-slow")
    manifest_a = read(a / "stop_manifest.json")
    assert [s["identity"] for s in manifest_a["seals"]] == ["a#n001-slow"]
    assert verify_ring(a) == []

    # Ring b continues a, with a new candidate beside the same slow one.
    config_b = write_config(tmp_path, ring_id="b", continue_from="runs/a",
                            candidates=str(cands_b))  # fmt: skip
    run_ring_and_cut(tmp_path, config_b, runs / "b", "n001-slow", ["n002-fresh"])
    b = runs / "b"
    lock_a, lock_b = read(a / "RING.json"), read(b / "RING.json")
    assert not set(lock_a["guard_seeds"]) & set(lock_b["guard_seeds"])
    assert lock_b["search_hash"] == lock_a["search_hash"]  # scores comparable
    imported = read(b / "carryover" / "imported.json")
    assert imported["rejected"] == [] and imported["queue"] == ["a#n001-slow"]
    index_b = read(b / "nodes" / "index.json")
    assert [n["id"] for n in index_b["nodes"]] == ["n001-slow", "n002-fresh"]
    resumed_b = sealed_node(b, "n001-slow")  # resumed, cut again, carried again
    assert resumed_b["origin"]["kind"] == "resume"
    assert [s["ring"] for s in resumed_b["resume_origin"]["segments"]] == ["a"]
    # Resumed before any new node.
    resumed_start = max(read(result(b, "n001-slow", v, "s0"))["started_at"] for v in VIEWS)
    fresh_start = min(read(result(b, "n002-fresh", v, x))["started_at"] for v, x in SEARCH)
    assert resumed_start < fresh_start
    handoff_b = read(b / "nodes" / "n001-slow" / "carryover" / "HANDOFF.json")
    assert [s["ring"] for s in handoff_b["segments"]] == ["a"]
    assert verify_ring(b) == []

    # Ring c continues b, resuming at most 2: only b's re-carried work.
    config_c = write_config(tmp_path, ring_id="c", continue_from="runs/b", max_resume_per_ring=2)
    run_ring_and_cut(tmp_path, config_c, runs / "c", "n001-slow", [])
    c = runs / "c"
    # b's scored node is imported with its comparable scores, not executed again.
    fresh_c = read(c / "nodes" / "n002-fresh" / "node.json")
    assert fresh_c["origin"]["kind"] == "imported" and fresh_c["imported"]["comparable"]
    assert fresh_c["imported"]["identity"] == "b#n002-fresh"
    assert not (c / "nodes" / "n002-fresh" / "exec" / "x3" / "s0").exists()
    imported_c = read(c / "carryover" / "imported.json")
    assert imported_c["queue"] == ["b#n001-slow"]
    assert [r["identity"] for r in imported_c["already_resumed"]] == ["a#n001-slow"]
    resumed_c = read(c / "nodes" / "n001-slow" / "node.json")
    segments = resumed_c["resume_origin"]["segments"]
    assert [(s["ring"], s["node"]) for s in segments] == [("a", "n001-slow"), ("b", "n001-slow")]
    assert segments[0]["seal_sha256"] == manifest_a["seals"][0]["seal_sha256"]
    assert read(c / "RING.json")["chain"]["changed"]["max_resume_per_ring"] == {
        "parent": 4,
        "this": 2,
    }
    nodes_c = [n["id"] for n in read(c / "nodes" / "index.json")["nodes"]]
    assert nodes_c == ["n001-slow", "n002-fresh"]
    assert verify_ring(c) == []


def test_a_ring_killed_while_sealing_seals_once_when_run_again(tmp_path):
    slow_candidate(tmp_path / "cands" / "slow")
    config = write_config(tmp_path, ring_id="a", task=str(make_task(tmp_path)),
                          candidates=str(tmp_path / "cands"), baseline=None)  # fmt: skip
    ring = tmp_path / "runs" / "a"
    # The seal is killed (SIGKILL) once its ledger line is written, before the node settles.
    run_ring_and_cut(tmp_path, config, ring, "n001-slow", [], exit_code=1,
                     env={**os.environ, STOP_ENV: "recorded"})  # fmt: skip
    assert read(ring / "nodes" / "n001-slow" / "node.json")["status"] == "ready"
    assert not (ring / "stop_manifest.json").exists()
    snakemake(tmp_path, config)  # the same command again
    node = sealed_node(ring, "n001-slow")
    sealed = [r for r in map(json.loads, (ring / "ledger.jsonl").read_text().splitlines())
              if r["kind"] == "carryover_sealed"]  # fmt: skip
    assert len(sealed) == 1 and node["carryover"]["ledger_seq"] == sealed[0]["seq"]
    assert read(ring / "stop_manifest.json")["seals"][0]["seal_sha256"] == sealed[0]["seal_sha256"]
    assert [n["id"] for n in read(ring / "nodes" / "index.json")["nodes"]] == ["n001-slow"]
    assert verify_ring(ring) == []
