"""A node (node.json) and an execution (result.json) as typed objects: read and written back
byte for byte, the ledger's hashes unchanged."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest

from ringflow.core.errors import InputError
from ringflow.core.layout import RingLayout
from ringflow.core.ledger import Ledger
from ringflow.core.node_state import (
    ExecutionResult,
    Node,
    read_node,
    read_result,
    write_node,
    write_result,
)
from ringflow.core.records import recorded
from ringflow.core.statuses import ExecutionStatus, NodeStatus, WeightsMode
from ringflow.execute import run_execution
from ringtools import locked_ring, make_candidate


def _text(record: dict) -> bytes:
    """A record as core.records.write_record writes it."""
    return (json.dumps(record, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


@pytest.fixture(scope="module")
def ring(tmp_path_factory):
    """A ring with its nodes imported and one execution (trained weights) run for real."""
    work = tmp_path_factory.mktemp("node_state")
    make_candidate(work / "cands" / "a", mean=0.5, weights=True)
    (work / "cands" / "b").mkdir()  # no program: rejected at import
    (work / "cands" / "b" / "notes.txt").write_text("nothing to run\n")
    root = locked_ring(work, work / "cands", "typed")
    run_execution(root, "n001-a", "proxy", "s0")
    return root


def test_real_records_round_trip_byte_for_byte(ring):
    layout = RingLayout(ring)
    latest = recorded(Ledger(layout.ledger))
    paths = [*layout.node_files("node.json"), layout.result("n001-a", "proxy", "s0")]
    assert len(paths) == 3
    for path in paths:
        raw = path.read_bytes()
        typed = (read_result if path.name == "result.json" else read_node)(path)
        record = json.loads(raw)
        assert typed.to_record() == record
        assert _text(typed.to_record()) == raw
        # The ledger hashed exactly these bytes.
        rel = path.relative_to(ring).as_posix()
        assert latest[rel]["sha256"] == hashlib.sha256(raw).hexdigest()
        assert typed.extra == {}


def test_a_real_result_is_typed(ring):
    path = RingLayout(ring).result("n001-a", "proxy", "s0")
    result, record = read_result(path), json.loads(path.read_text())
    assert result.status is ExecutionStatus.OK and result.ok
    assert result.weights_mode is WeightsMode.TRAIN
    assert (result.node, result.view, result.variant, result.seed) == ("n001-a", "proxy", "s0", 0)
    assert isinstance(result.reap_left, tuple) and list(result.reap_left) == record["reap_left"]
    assert result.weights_key == record["weights_key"] is not None
    assert result.slurm_job_id is None and "slurm_job_id" not in result.to_record()


def test_real_nodes_are_typed(ring):
    layout = RingLayout(ring)
    good = read_node(layout.node_json("n001-a"))
    assert good.status is NodeStatus.READY and good.role == "candidate" and good.name == "a"
    assert good.tree_hash and good.solution["per_view_paths"]
    assert good.spec("proxy", "s0")["seed"] == 0 and good.spec("proxy", "nope") is None
    bad = read_node(layout.node_json("n002-b"))
    assert bad.status is NodeStatus.REJECTED and bad.error and bad.executions == {}


def test_written_back_the_file_and_its_ledger_hash_are_the_same(ring, tmp_path):
    layout = RingLayout(ring)
    for path, read, write in [
        (layout.result("n001-a", "proxy", "s0"), read_result, write_result),
        (layout.node_json("n001-a"), read_node, write_node),
    ]:
        copy = tmp_path / "ring" / path.relative_to(ring)
        copy.parent.mkdir(parents=True, exist_ok=True)
        line = write(tmp_path / "ring", copy, read(path))
        assert copy.read_bytes() == path.read_bytes()
        assert line["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()


def test_partial_records_get_defaults_and_write_back_only_their_keys():
    result = ExecutionResult.from_record({"status": "crash", "budget_cut": False})
    assert result.status is ExecutionStatus.CRASH and not result.ok
    assert result.events == () and result.reap_left == () and result.wall_s is None
    assert result.to_record() == {"status": "crash", "budget_cut": False}
    node = Node.from_record({"id": "n1", "tree_hash": "t"})
    assert node.status is None and node.origin == {} and node.executions == {}
    assert node.to_record() == {"id": "n1", "tree_hash": "t"}


def test_unknown_keys_are_kept():
    record = {"status": "ok", "node": "n1", "future_key": {"x": 1}}
    result = ExecutionResult.from_record(record)
    assert result.extra == {"future_key": {"x": 1}}
    assert result.to_record() == record
    node = {"id": "n1", "status": "ready", "future_key": [1, 2]}
    assert Node.from_record(node).to_record() == node


def test_a_slurm_job_id_is_written_only_when_set():
    result = ExecutionResult.from_record({"status": "ok"})
    assert "slurm_job_id" not in result.to_record()
    assert dataclasses.replace(result, slurm_job_id="42").to_record() == {
        "status": "ok",
        "slurm_job_id": "42",
    }
    read = ExecutionResult.from_record({"status": "ok", "slurm_job_id": "7"})
    assert read.slurm_job_id == "7" and read.extra == {}


def test_statuses_are_the_one_vocabulary():
    for status in NodeStatus:  # history and carried_over included
        node = Node.from_record({"id": "n1", "status": status.value})
        assert node.status is status
        assert node.to_record() == {"id": "n1", "status": status.value}
    # A node and an execution carried over say it in the same words.
    assert NodeStatus.CARRIED_OVER == ExecutionStatus.CARRIED_OVER
    for status in ExecutionStatus:
        assert ExecutionResult.from_record({"status": status.value}).status is status
    # A status no vocabulary has is kept as written.
    assert ExecutionResult.from_record({"status": "odd"}).to_record() == {"status": "odd"}


@pytest.mark.parametrize(
    ("cls", "record", "message"),
    [
        (ExecutionResult, {"node": "n1"}, "not an execution result (missing 'status')"),
        (Node, {"status": "ready"}, "not a node record (missing 'id')"),
    ],
)
def test_a_record_without_its_required_keys_is_refused(cls, record, message):
    with pytest.raises(InputError) as caught:
        cls.from_record(record, source="/runs/r/nodes/n1/x.json")
    assert str(caught.value) == f"/runs/r/nodes/n1/x.json: {message}"


def test_a_file_without_its_required_keys_is_refused(tmp_path):
    path = tmp_path / "result.json"
    path.write_text(json.dumps({"node": "n1"}))
    with pytest.raises(InputError, match=r"result\.json: not an execution .*\(missing 'status'\)"):
        read_result(path)
    path = tmp_path / "node.json"
    path.write_text(json.dumps(["id"]))
    with pytest.raises(InputError, match=r"node\.json: a node record must be a JSON object"):
        read_node(path)


def test_records_are_frozen():
    result = ExecutionResult.from_record({"status": "ok"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.status = "crash"  # type: ignore[misc]
