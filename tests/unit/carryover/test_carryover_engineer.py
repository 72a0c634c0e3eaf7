"""The engineer kind of carryover (docs/operations.md#carryover): an engineer session cut at the
hand-over point without a runnable program is sealed with its workspace, plan and raw log;
a seal killed at any step is whole or absent; a resume node's query quota spans its
segments."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from carrytools import ledger_records
from engtools import SECRET, SECRET_NAME, ring_with_cut_session
from ringflow.carryover import engineer
from ringflow.carryover.executions import seal_ring
from ringflow.carryover.seal import STEPS, STOP_ENV, seal_problems
from ringflow.core.clock import load_ring
from ringflow.core.layout import RingLayout
from ringflow.core.node_state import Node
from ringflow.search import instructions
from ringflow.search.queries import QueryServer
from ringflow.search.query_client import ask, collect
from ringflow.verify import verify_ring


def read(path):
    return json.loads(path.read_text())


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def secret_env(monkeypatch):
    monkeypatch.setenv(SECRET_NAME, SECRET)
    return {**os.environ, SECRET_NAME: SECRET}


def test_a_cut_session_is_sealed_with_its_workspace_plan_and_redacted_log(tmp_path, secret_env):
    ring, node_id = ring_with_cut_session(tmp_path, secret_env)
    node = read(ring / "nodes" / node_id / "node.json")
    assert node["status"] == "carried_over" and node["carryover"]["kind"] == "engineer"
    session = read(ring / "nodes" / node_id / "session.json")
    assert session["status"] == "cut" and not session["reap_left"]
    assert session["queries_used"] == 0 and session["queries_quota"] == 5
    # The workspace outlives the session's sandbox folder, for the seal.
    assert (ring / "nodes" / node_id / "workspace" / "notes.md").is_file()

    listing = seal_ring(ring)

    assert [s["kind"] for s in listing["seals"]] == ["engineer"]
    snapshot = ring / "nodes" / node_id / "carryover"
    seal = read(snapshot / "SEAL.json")
    paths = {f["path"] for f in seal["files"]}
    assert {"solution/notes.md", "solution/PLAN.json", "PLAN.json", "HANDOFF.json",
            "trajectory/stdout.log", "trajectory/INSTRUCTIONS.md"} <= paths  # fmt: skip
    assert seal_problems(snapshot, seal) == []
    log = (snapshot / "trajectory" / "stdout.log").read_text()
    assert SECRET not in log and f"token is [{SECRET_NAME} redacted]" in log
    for item in seal["files"]:
        assert SECRET.encode() not in (snapshot / item["path"]).read_bytes(), item["path"]
    handoff = read(snapshot / "HANDOFF.json")
    assert handoff["kind"] == "engineer" and handoff["node"] == node_id
    assert handoff["run_py"] is False and "run.py" in handoff["why"]
    assert handoff["queries_used"] == 0 and handoff["queries_settled"] is True
    assert handoff["deadline"] == session["deadline"] and handoff["cut_at"] == session["ended_at"]
    assert handoff["changed_files"]["added"] == ["PLAN.json", "notes.md"]
    assert handoff["last_messages"][-1] == "thinking"
    assert handoff["parent"] is None and handoff["generation"] == 0 and handoff["segments"] == []
    (record,) = ledger_records(ring, "carryover_sealed")
    assert record["carry_kind"] == "engineer" and record["identity"] == f"a#{node_id}"
    assert record["seal_sha256"] == sha256(snapshot / "SEAL.json")
    settled = read(ring / "nodes" / node_id / "node.json")
    assert settled["carryover"]["seal_sha256"] == record["seal_sha256"]
    assert settled["carryover"]["reason"] == node["carryover"]["reason"]
    # Sealing again changes nothing; verify checks the seal.
    seal_ring(ring)
    assert len(ledger_records(ring, "carryover_sealed")) == 1
    assert verify_ring(ring) == []


def test_a_session_that_left_processes_is_never_sealed(tmp_path, secret_env):
    ring, node_id = ring_with_cut_session(tmp_path, secret_env)
    path = ring / "nodes" / node_id / "session.json"
    path.write_text(json.dumps({**read(path), "reap_left": [4242]}))
    listing = seal_ring(ring)
    assert listing["seals"] == [] and "reap_left" in listing["refused"][0]["reason"]
    assert not (ring / "nodes" / node_id / "carryover").exists()


@pytest.mark.parametrize("step", STEPS)
def test_an_engineer_seal_killed_at_any_step_is_whole_or_absent(tmp_path, secret_env, step):
    ring, node_id = ring_with_cut_session(tmp_path, secret_env)
    seal = [sys.executable, "-m", "ringflow", "step", "seal", str(ring)]
    killed = subprocess.run(seal, env={**secret_env, STOP_ENV: step}, capture_output=True)
    assert killed.returncode == -9, killed.stderr
    snapshot = ring / "nodes" / node_id / "carryover"
    if snapshot.exists():
        assert seal_problems(snapshot, read(snapshot / "SEAL.json")) == []
    assert len(ledger_records(ring, "carryover_sealed")) == (step in ("recorded", "settled"))

    again = subprocess.run(seal, env=secret_env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    (record,) = ledger_records(ring, "carryover_sealed")
    assert record["seal_sha256"] == sha256(snapshot / "SEAL.json")
    assert not list(snapshot.parent.glob(".carryover-*"))
    node = read(ring / "nodes" / node_id / "node.json")
    assert node["carryover"]["kind"] == "engineer"
    assert node["carryover"]["ledger_seq"] == record["seq"]
    assert verify_ring(ring) == []


def _segment(ring, node, used):
    return {"ring": ring, "node": node, "kind": "engineer", "sealed_at": 1.0e9,
            "quota": {"used": used, "quota": 5}}  # fmt: skip


def _resume_node(*used):
    segments = [_segment("ab"[i], f"n00{i}-x", count) for i, count in enumerate(used)]
    return Node.from_record(
        {"id": "n001-x", "origin": {"kind": "resume", "path": "/nowhere"}, "parent": None,
         "resume_origin": {"identity": "b#n001-x", "snapshot": "carryover/imported/b--n001-x",
                           "segments": segments}}
    )  # fmt: skip


def test_a_resume_nodes_quota_is_what_its_earlier_segments_left(tmp_path, secret_env):
    ring, _node = ring_with_cut_session(tmp_path, secret_env)
    lock = load_ring(ring)
    improve = Node.from_record({"id": "n002-y", "origin": {"kind": "improve"}})
    assert engineer.queries_left(lock, improve) == 5
    assert engineer.queries_left(lock, _resume_node(1, 2)) == 2
    assert engineer.queries_left(lock, _resume_node(4, 3)) == 0
    # A segment whose count is unknown leaves nothing.
    assert engineer.queries_left(lock, _resume_node(1, None)) == 0

    # Shown in the instructions, in the feedback section.
    layout = RingLayout(ring)
    text = instructions.render(instructions.context(lock, layout, _resume_node(1, 2), 1e9))
    feedback = text.split("## Feedback")[1]
    assert "score queries left: 2" in feedback and "segments used 3" in feedback
    text = instructions.render(instructions.context(lock, layout, _resume_node(1, None), 1e9))
    assert "score queries left: 0" in text and "unknown counts leave none" in text

    # Enforced by the scorer side: the second query is refused.
    server = QueryServer(lock, layout, "n009-q", tmp_path / "qwork", quota=1)
    folder = tmp_path / "pred"
    folder.mkdir()
    (folder / "score.json").write_text(json.dumps({"value": 0.5}))
    answers = [ask(str(server.path), collect(folder), token=server.token) for _ in range(2)]
    assert server.close() == 1
    assert answers[0]["valid"] and "quota of 1" in answers[1]["refused"]


def test_a_resumed_nodes_parent_is_looked_up_where_its_work_began(tmp_path):
    first, second = tmp_path / "runs" / "a", tmp_path / "runs" / "b"
    sealed_once = {"parent": "n001-a", "segments": []}
    sealed_twice = {"parent": "n001-a", "segments": [{"ring": "a", "ring_dir": str(first)}]}
    assert engineer.parent_ring_dir(first, sealed_once) == first
    # Re-carried in ring b, the parent it names is still ring a's node.
    assert engineer.parent_ring_dir(second, sealed_twice) == first
    node = Node.from_record({"id": "n001-x", "parent": "n001-a", "origin": {"kind": "resume"},
                             "resume_origin": {"segments": sealed_twice["segments"]}})  # fmt: skip
    assert engineer.parent_layout(RingLayout(second), node).root == first
    assert engineer.parent_submission(RingLayout(second), node) is None  # not there: no view
    (first / "nodes" / "n001-a" / "solution").mkdir(parents=True)
    assert engineer.parent_submission(RingLayout(second), node) == (
        first / "nodes" / "n001-a" / "solution"
    )
