"""Resume (docs/operations.md#carryover): verified work becomes a new node of the continuing ring,
served first, oldest first, at most max_resume_per_ring, and never resumed twice."""

from __future__ import annotations

import json

from test_carryover_import import continuing

from carrytools import ring_with_cut
from ringflow.carryover.executions import seal_ring
from ringflow.carryover.importing import import_carryover
from ringflow.carryover.registry import ResumeRegistry
from ringflow.core.clock import load_ring
from ringflow.nodes import import_static


def read(path):
    return json.loads(path.read_text())


def imported_ring(ring_dir):
    done = import_carryover(ring_dir)
    return done, import_static(load_ring(ring_dir))


def test_a_resume_node_runs_the_same_submission_with_its_lineage(tmp_path):
    a = ring_with_cut(tmp_path)
    seal_ring(a)
    b = continuing(tmp_path, a)
    done, index = imported_ring(b)
    assert done["queue"] == ["a#n001-slow"]
    # One node for the work: the candidate folder's own copy of it is the resumed work.
    assert [(n["id"], n["role"], n["status"]) for n in index["nodes"]] == [
        ("n001-slow", "candidate", "ready")
    ]
    node = read(b / "nodes" / "n001-slow" / "node.json")
    assert node["origin"]["kind"] == "resume" and node["origin"]["identity"] == "a#n001-slow"
    assert node["parent"] is None  # the carried node's real parent: a static candidate's none
    (segment,) = node["resume_origin"]["segments"]
    assert (segment["ring"], segment["node"]) == ("a", "n001-slow")
    assert segment["lock_sha256"] and segment["seal_sha256"] and segment["snapshot"]
    original = read(a / "nodes" / "n001-slow" / "node.json")
    assert node["tree_hash"] == original["tree_hash"]
    assert node["executions"]["proxy"]["s0"] == original["executions"]["proxy"]["s0"]
    claim = ResumeRegistry(tmp_path / "store").claimed_by("a#n001-slow", segment["lock_sha256"])
    assert claim["ring_id"] == "b"


def test_at_most_max_resume_per_ring_oldest_first_the_rest_waits(tmp_path):
    a = ring_with_cut(tmp_path, names=("early", "late"))
    seal_ring(a)
    b = continuing(tmp_path, a, max_resume_per_ring=1)
    done, index = imported_ring(b)
    assert done["queue"] == ["a#n001-early"]
    assert done["waiting"] == ["a#n002-late"]
    nodes = {n["id"]: read(b / "nodes" / n["id"] / "node.json") for n in index["nodes"]}
    resumed = [i for i, n in nodes.items() if n["origin"]["kind"] == "resume"]
    assert resumed == ["n001-early"]
    # The waiting work's candidate is an ordinary node of this ring.
    assert nodes["n002-late"]["origin"]["kind"] == "static"
    # The next ring resumes what waited, and not what this ring resumed.
    c = continuing(tmp_path, b, ring_id="c")
    done_c, _ = imported_ring(c)
    assert done_c["queue"] == ["a#n002-late"]
    assert [r["identity"] for r in done_c["already_resumed"]] == ["a#n001-early"]


def test_two_sibling_rings_cannot_both_resume_the_same_work(tmp_path):
    a = ring_with_cut(tmp_path)
    seal_ring(a)
    first = continuing(tmp_path, a, ring_id="b1")
    second = continuing(tmp_path, a, ring_id="b2")
    assert import_carryover(first)["queue"] == ["a#n001-slow"]
    done = import_carryover(second)
    assert done["queue"] == []
    assert done["already_resumed"] == [
        {"identity": "a#n001-slow", "by": "b1", "by_dir": str(first)}
    ]
    # The first ring importing again keeps its own claim.
    assert import_carryover(first)["queue"] == ["a#n001-slow"]


def test_work_whose_parent_failed_review_is_refused(tmp_path):
    a = ring_with_cut(tmp_path)
    node_json = a / "nodes" / "n001-slow" / "node.json"
    node_json.write_text(json.dumps({**read(node_json), "parent": "n000-root"}))
    review = {"node": "n000-root", "passed": False, "reasons": ["differs on a disguised view"]}
    (a / "selection").mkdir()
    (a / "selection" / "review-n000-root.json").write_text(json.dumps(review))
    seal_ring(a)
    b = continuing(tmp_path, a)
    done, index = imported_ring(b)
    assert done["queue"] == []
    (refused,) = done["refused"]
    assert refused["identity"] == "a#n001-slow"
    assert "parent n000-root failed review" in refused["reason"]
    assert "differs on a disguised view" in refused["reason"]
    ledger = [json.loads(line) for line in (b / "ledger.jsonl").read_text().splitlines()]
    assert [r["identity"] for r in ledger if r["kind"] == "resume_refused"] == ["a#n001-slow"]
    # The candidate folder's copy runs as an ordinary node.
    assert [read(b / "nodes" / n["id"] / "node.json")["origin"]["kind"]
            for n in index["nodes"]] == ["static"]  # fmt: skip
