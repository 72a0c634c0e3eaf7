"""Sealing work cut by the cutoff (docs/operations.md#carryover): one transaction, a complete seal
or none."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from carrytools import ledger_records, ring_with_cut
from ringflow.carryover.executions import seal_ring
from ringflow.carryover.manifest import write_stop_manifest
from ringflow.carryover.seal import STEPS, STOP_ENV, seal_problems
from ringflow.core.layout import RingLayout
from ringflow.core.ledger import Ledger
from ringflow.verify import ledger_anchors, verify_ring


def read(path):
    return json.loads(path.read_text())


def test_a_cut_training_run_is_sealed_with_its_grace_checkpoint(tmp_path):
    ring = ring_with_cut(tmp_path, running=True)
    result = read(ring / "nodes" / "n001-slow" / "exec" / "proxy" / "s0" / "result.json")
    assert result["status"] == "interrupted" and result["budget_cut"] and not result["reap_left"]
    assert result["weights_mode"] == "train"

    listing = seal_ring(ring)

    snapshot = ring / "nodes" / "n001-slow" / "carryover"
    seal = read(snapshot / "SEAL.json")
    paths = {f["path"] for f in seal["files"]}
    assert {"solution/run.py", "solution/ARTIFACTS.json", "HANDOFF.json"} <= paths
    inside = "checkpoint/proxy/s0"
    # What the run wrote during the grace: its checkpoint and partial output.
    assert (snapshot / inside / "solution/weights/ckpt.txt").read_text() == "epoch 3 of 10\n"
    assert (snapshot / inside / "output/partial.txt").read_text() == "half done\n"
    assert {f"{inside}/result.json", f"{inside}/stderr.log"} <= paths
    # The link the program left is listed as skipped, never copied.
    assert seal["skipped"] == [
        {"path": f"{inside}/solution/weights/latest", "why": "symlink", "size": 8}
    ]
    assert not (snapshot / inside / "solution/weights/latest").exists()
    for item in seal["files"]:
        assert hashlib.sha256((snapshot / item["path"]).read_bytes()).hexdigest() == item["sha256"]
    assert seal_problems(snapshot, seal) == []
    handoff = read(snapshot / "HANDOFF.json")
    assert handoff["kind"] == "execution" and handoff["run_py"] is True
    assert [c["view"] for c in handoff["cut"]] == ["proxy"]
    # The ledger records the seal's own hash; the node is settled.
    (record,) = ledger_records(ring, "carryover_sealed")
    sealed = hashlib.sha256((snapshot / "SEAL.json").read_bytes()).hexdigest()
    assert record["seal_sha256"] == sealed
    assert record["identity"] == "a#n001-slow"
    node = read(ring / "nodes" / "n001-slow" / "node.json")
    assert node["status"] == "carried_over"
    assert node["carryover"]["kind"] == "execution"
    assert node["carryover"]["seal_sha256"] == record["seal_sha256"]
    assert listing["seals"][0]["identity"] == "a#n001-slow"
    # Immutable: the snapshot's files are read-only.
    assert all((snapshot / f).stat().st_mode & 0o222 == 0 for f in paths)

    # Sealing again changes nothing.
    seal_ring(ring)
    assert len(ledger_records(ring, "carryover_sealed")) == 1

    manifest = write_stop_manifest(ring)
    assert manifest["seals"][0]["seal_sha256"] == record["seal_sha256"]
    assert manifest["ledger_head"] == Ledger(ring / "ledger.jsonl").head()
    assert ("stop_manifest.json", manifest["ledger_head"]) in ledger_anchors(RingLayout(ring))
    assert verify_ring(ring) == []
    # verify checks every seal against its snapshot.
    target = snapshot / "solution" / "run.py"
    os.chmod(target, 0o644)
    target.write_text("print('changed after sealing')\n")
    assert any("solution/run.py: content differs" in p for p in verify_ring(ring))


def test_a_run_with_processes_left_after_the_stop_is_never_sealed(tmp_path):
    ring = ring_with_cut(tmp_path)
    path = ring / "nodes" / "n001-slow" / "exec" / "proxy" / "s0" / "result.json"
    result = read(path)
    path.write_text(json.dumps({**result, "reap_left": [4242]}))
    listing = seal_ring(ring)
    assert listing["seals"] == []
    assert listing["refused"][0]["node"] == "n001-slow"
    assert "reap_left" in listing["refused"][0]["reason"]
    assert not (ring / "nodes" / "n001-slow" / "carryover").exists()
    assert ledger_records(ring, "carryover_sealed") == []


def test_a_run_that_finished_or_crashed_is_not_sealed(tmp_path):
    ring = ring_with_cut(tmp_path)
    path = ring / "nodes" / "n001-slow" / "exec" / "proxy" / "s0" / "result.json"
    path.write_text(json.dumps({**read(path), "budget_cut": False, "status": "crash"}))
    assert seal_ring(ring)["seals"] == []
    assert read(ring / "nodes" / "n001-slow" / "node.json")["status"] == "ready"


@pytest.mark.parametrize("step", STEPS)
def test_a_seal_killed_at_any_step_is_whole_or_absent_and_a_rerun_finishes_it(tmp_path, step):
    ring = ring_with_cut(tmp_path)
    seal = [sys.executable, "-m", "ringflow", "step", "seal", str(ring)]
    killed = subprocess.run(seal, env={**os.environ, STOP_ENV: step}, capture_output=True)
    assert killed.returncode == -9, killed.stderr

    snapshot = ring / "nodes" / "n001-slow" / "carryover"
    recorded = ledger_records(ring, "carryover_sealed")
    if snapshot.exists():  # whole: it verifies against its own SEAL.json
        assert seal_problems(snapshot, read(snapshot / "SEAL.json")) == []
    assert len(recorded) == (1 if step in ("recorded", "settled") else 0)

    again = subprocess.run(seal, env={k: v for k, v in os.environ.items() if k != STOP_ENV},
                           capture_output=True, text=True)  # fmt: skip
    assert again.returncode == 0, again.stderr
    (record,) = ledger_records(ring, "carryover_sealed")
    seal_file = snapshot / "SEAL.json"
    assert record["seal_sha256"] == hashlib.sha256(seal_file.read_bytes()).hexdigest()
    assert seal_problems(snapshot, read(seal_file)) == []
    assert not list(snapshot.parent.glob(".carryover-*")), "staging left behind"
    node = read(ring / "nodes" / "n001-slow" / "node.json")
    assert node["status"] == "carried_over" and node["carryover"]["ledger_seq"] == record["seq"]
    assert (
        read(ring / "carryover" / "seals.json")["seals"][0]["seal_sha256"] == record["seal_sha256"]
    )
    assert Ledger(ring / "ledger.jsonl").verify() == []


def test_a_carried_over_node_is_not_executed_again_in_its_ring(tmp_path):
    ring = ring_with_cut(tmp_path)
    seal_ring(ring)
    run = subprocess.run(
        [sys.executable, "-m", "ringflow", "step", "execute", str(ring), "n001-slow", "x3", "s0"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 2
    assert "n001-slow was carried over (sealed in nodes/n001-slow/carryover/)" in run.stderr
    assert not (ring / "nodes" / "n001-slow" / "exec" / "x3" / "s0" / "result.json").exists()


def test_files_over_max_file_mb_are_listed_as_skipped_not_sealed(tmp_path):
    ring = ring_with_cut(tmp_path, max_file_mb=0.0001)  # 104 bytes
    seal_ring(ring)
    snapshot = ring / "nodes" / "n001-slow" / "carryover"
    seal = read(snapshot / "SEAL.json")
    skipped = {s["path"]: s for s in seal["skipped"]}
    assert skipped["solution/run.py"]["why"].startswith("larger than max_file_mb")
    assert skipped["solution/run.py"]["size"] > 104
    assert not (snapshot / "solution" / "run.py").exists()
    assert "solution/behaviour.json" in {f["path"] for f in seal["files"]}  # small: sealed
    assert read(snapshot / "HANDOFF.json")["skipped"] == seal["skipped"]
    assert seal_problems(snapshot, seal) == []
