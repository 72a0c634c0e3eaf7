"""Evidence seals (docs/operations.md#carryover): an engineer session cut at the hand-over point
with a runnable program is executed as any node, and its snapshot is sealed only as evidence, in
`nodes/<id>/evidence/`, by the same transaction as a carryover seal; it never settles the
node, coexists with a carryover seal of the node's cut run, is never imported, and
`ringflow verify` checks it. The last test runs such a ring end to end."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys

import pytest
from test_carryover_import import continuing

from carrytools import cut_before_start, ledger_records
from engtools import SECRET, SECRET_NAME, ring_with_cut_session
from ringflow.carryover.executions import seal_ring
from ringflow.carryover.importing import import_carryover
from ringflow.carryover.manifest import write_stop_manifest
from ringflow.carryover.seal import STEPS, STOP_ENV, seal_problems
from ringflow.verify import verify_ring

# Writes a runnable program and a plan early, then keeps working until it is stopped.
PROGRAM_SH = """\
cat > run.py <<'PY'
import json, os
out = os.path.join(os.environ["RINGFLOW_OUTPUT_DIR"], "score.json")
open(out, "w").write(json.dumps({"value": 0.7}))
PY
printf '{"next": "tune it"}\\n' > PLAN.json
echo "A constant prediction, written early." > METHOD.md
echo "token is $RINGFLOW_TEST_TOKEN"
echo "thinking"
sleep 600
"""

WHY = "cut at the hand-over with a runnable program"


def read(path):
    return json.loads(path.read_text())


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def writable(path):
    os.chmod(path, stat.S_IMODE(path.stat().st_mode) | 0o200)
    return path


@pytest.fixture
def secret_env(monkeypatch):
    monkeypatch.setenv(SECRET_NAME, SECRET)
    return {**os.environ, SECRET_NAME: SECRET}


@pytest.fixture
def cut_with_program(tmp_path, secret_env):
    """Ring a, whose one draft session wrote a program and was cut at the hand-over."""
    ring, node_id = ring_with_cut_session(tmp_path, secret_env, script_text=PROGRAM_SH)
    session = read(ring / "nodes" / node_id / "session.json")
    assert session["budget_cut"] and session["runnable"] and session["node_status"] == "ready"
    return ring, node_id


def test_the_session_is_sealed_as_evidence_and_its_node_is_left_as_it_is(cut_with_program):
    ring, node_id = cut_with_program
    node_json = ring / "nodes" / node_id / "node.json"
    before = node_json.read_bytes()
    assert read(node_json)["status"] == "ready"

    listing = seal_ring(ring)

    assert listing["seals"] == [] and listing["evidence_refused"] == []
    (listed,) = listing["evidence"]
    assert listed["identity"] == f"a#{node_id}" and listed["kind"] == "evidence"
    assert listed["snapshot"] == f"nodes/{node_id}/evidence"
    evidence = ring / "nodes" / node_id / "evidence"
    seal = read(evidence / "SEAL.json")
    assert seal["kind"] == "evidence" and seal["identity"] == f"a#{node_id}"
    paths = {f["path"] for f in seal["files"]}
    assert {"solution/run.py", "solution/PLAN.json", "solution/METHOD.md", "PLAN.json",
            "HANDOFF.json", "trajectory/stdout.log",
            "trajectory/INSTRUCTIONS.md"} <= paths  # fmt: skip
    for item in seal["files"]:
        assert sha256(evidence / item["path"]) == item["sha256"], item["path"]
        assert SECRET.encode() not in (evidence / item["path"]).read_bytes(), item["path"]
        assert (evidence / item["path"]).stat().st_mode & 0o222 == 0, item["path"]
    assert seal_problems(evidence, seal) == []
    # The submission as it was handed over, which the ring executes.
    submission = ring / "nodes" / node_id / "solution"
    assert (evidence / "solution" / "run.py").read_bytes() == (submission / "run.py").read_bytes()
    log = (evidence / "trajectory" / "stdout.log").read_text()
    assert f"token is [{SECRET_NAME} redacted]" in log
    handoff = read(evidence / "HANDOFF.json")
    assert handoff["evidence"] is True and handoff["kind"] == "evidence"
    assert handoff["why"] == WHY and handoff["runs"] is True and handoff["run_py"] is True
    assert handoff["plan"] is True and handoff["method"].startswith("A constant prediction")
    assert handoff["changed_files"]["added"] == ["METHOD.md", "PLAN.json", "run.py"]
    assert handoff["queries_used"] == 0 and handoff["queries_settled"] is True
    session = read(ring / "nodes" / node_id / "session.json")
    assert handoff["cut_at"] == session["ended_at"] and handoff["session"]["budget_cut"] is True
    assert handoff["last_messages"][-1] == "thinking"
    assert handoff["tree_hash"] == read(node_json)["tree_hash"]
    # The ledger records it as evidence, never as carryover; the node is untouched.
    (record,) = ledger_records(ring, "evidence_sealed")
    assert record["identity"] == f"a#{node_id}" and record["why"] == WHY
    assert record["seal_sha256"] == sha256(evidence / "SEAL.json")
    assert ledger_records(ring, "carryover_sealed") == []
    assert node_json.read_bytes() == before
    assert not (ring / "nodes" / node_id / "carryover").exists()

    # Sealing again changes nothing; the stop manifest lists it apart; verify checks it.
    assert seal_ring(ring)["evidence"] == [listed]
    assert len(ledger_records(ring, "evidence_sealed")) == 1
    manifest = write_stop_manifest(ring)
    assert manifest["seals"] == [] and manifest["evidence"] == [listed]
    assert verify_ring(ring) == []


def test_a_changed_evidence_file_or_seal_is_reported_by_verify(cut_with_program):
    ring, node_id = cut_with_program
    seal_ring(ring)
    evidence = ring / "nodes" / node_id / "evidence"
    writable(evidence / "trajectory" / "stdout.log").write_text("rewritten\n")
    assert any("evidence" in p and "trajectory/stdout.log: content differs" in p
               for p in verify_ring(ring))  # fmt: skip
    os.remove(writable(evidence / "PLAN.json"))
    assert any("PLAN.json: missing" in p for p in verify_ring(ring))
    seal_file = writable(evidence / "SEAL.json")
    seal_file.write_text(seal_file.read_text().replace('"kind":"evidence"', '"kind":"engineer"'))
    problems = verify_ring(ring)
    assert any("SEAL.json: differs from the seal the ledger records" in p for p in problems)


def test_a_session_that_left_processes_leaves_no_evidence(cut_with_program):
    ring, node_id = cut_with_program
    path = ring / "nodes" / node_id / "session.json"
    path.write_text(json.dumps({**read(path), "reap_left": [4242]}))
    listing = seal_ring(ring)
    assert listing["evidence"] == []
    (refused,) = listing["evidence_refused"]
    assert refused["node"] == node_id and "reap_left" in refused["reason"]
    assert not (ring / "nodes" / node_id / "evidence").exists()
    assert ledger_records(ring, "evidence_sealed") == []


def test_a_session_that_ended_by_itself_leaves_no_evidence(cut_with_program):
    ring, node_id = cut_with_program
    path = ring / "nodes" / node_id / "session.json"
    path.write_text(json.dumps({**read(path), "budget_cut": False}))
    assert seal_ring(ring)["evidence"] == []
    assert not (ring / "nodes" / node_id / "evidence").exists()


@pytest.mark.parametrize("step", STEPS)
def test_an_evidence_seal_killed_at_any_step_is_whole_or_absent(cut_with_program, secret_env,
                                                                 step):  # fmt: skip
    ring, node_id = cut_with_program
    node_json = ring / "nodes" / node_id / "node.json"
    before = node_json.read_bytes()
    seal = [sys.executable, "-m", "ringflow", "step", "seal", str(ring)]
    killed = subprocess.run(seal, env={**secret_env, STOP_ENV: step}, capture_output=True)
    assert killed.returncode == -9, killed.stderr
    evidence = ring / "nodes" / node_id / "evidence"
    if evidence.exists():  # whole: it verifies against its own SEAL.json
        assert seal_problems(evidence, read(evidence / "SEAL.json")) == []
    assert len(ledger_records(ring, "evidence_sealed")) == (step in ("recorded", "settled"))

    again = subprocess.run(seal, env=secret_env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert "(evidence only)" in again.stdout
    (record,) = ledger_records(ring, "evidence_sealed")
    assert record["seal_sha256"] == sha256(evidence / "SEAL.json")
    assert seal_problems(evidence, read(evidence / "SEAL.json")) == []
    assert not list(evidence.parent.glob(".evidence-*")), "staging left behind"
    assert read(ring / "carryover" / "seals.json")["evidence"][0]["ledger_seq"] == record["seq"]
    assert ledger_records(ring, "carryover_sealed") == []
    assert node_json.read_bytes() == before
    assert verify_ring(ring) == []


def test_evidence_and_a_carryover_seal_of_the_cut_run_coexist(tmp_path, cut_with_program):
    ring, node_id = cut_with_program
    result = cut_before_start(ring, node_id)  # its seed-0 run is cut by the cutoff
    assert result["status"] == "interrupted" and result["budget_cut"]

    listing = seal_ring(ring)

    assert [s["kind"] for s in listing["seals"]] == ["execution"]
    assert [s["kind"] for s in listing["evidence"]] == ["evidence"]
    carryover = ring / "nodes" / node_id / "carryover"
    evidence = ring / "nodes" / node_id / "evidence"
    (sealed,) = ledger_records(ring, "carryover_sealed")
    (kept,) = ledger_records(ring, "evidence_sealed")
    assert sealed["carry_kind"] == "execution" and sealed["seal_sha256"] == sha256(
        carryover / "SEAL.json"
    )
    assert kept["seal_sha256"] == sha256(evidence / "SEAL.json")
    assert seal_problems(carryover, read(carryover / "SEAL.json")) == []
    assert seal_problems(evidence, read(evidence / "SEAL.json")) == []
    node = read(ring / "nodes" / node_id / "node.json")
    assert node["status"] == "carried_over" and node["carryover"]["kind"] == "execution"
    assert node["carryover"]["seal_sha256"] == sealed["seal_sha256"]
    # Sealing again (the node is now carried over) keeps both, and adds nothing.
    again = seal_ring(ring)
    assert again["seals"] == listing["seals"] and again["evidence"] == listing["evidence"]
    assert len(ledger_records(ring, "evidence_sealed")) == 1
    assert len(ledger_records(ring, "carryover_sealed")) == 1
    manifest = write_stop_manifest(ring)
    assert [s["snapshot"] for s in manifest["seals"]] == [f"nodes/{node_id}/carryover"]
    assert [s["snapshot"] for s in manifest["evidence"]] == [f"nodes/{node_id}/evidence"]
    assert verify_ring(ring) == []

    # A continuing ring imports the carried run, never the evidence.
    b = continuing(tmp_path, ring)
    done = import_carryover(b)
    assert done["rejected"] == []
    assert [(i["identity"], i["kind"]) for i in done["imported"]] == [(f"a#{node_id}", "execution")]
    (copy,) = (b / "carryover" / "imported").iterdir()
    assert read(copy / "SEAL.json")["kind"] == "execution"
    assert not (copy / "trajectory").exists()


def test_evidence_alone_is_never_imported(tmp_path, cut_with_program):
    ring, _node = cut_with_program
    seal_ring(ring)
    b = continuing(tmp_path, ring)
    done = import_carryover(b)
    assert done["imported"] == [] and done["queue"] == [] and done["rejected"] == []
    assert ledger_records(b, "carryover_imported") == []
    imported = b / "carryover" / "imported"
    assert not imported.exists() or list(imported.iterdir()) == []
