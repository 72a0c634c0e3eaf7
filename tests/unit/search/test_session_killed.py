"""An engineer session whose SLURM job SLURM ended (docs/slurm.md#job-ids-signals-and-kills):
the driver settles the node from the workspace the job left, as after a crashed engineer,
with SLURM's reason on record."""

from __future__ import annotations

import json
import time

from engtools import engineer_config, search_config
from ringflow.cluster import jobs
from ringflow.cluster.jobs import JobEnd
from ringflow.core.jsonio import atomic_write_json
from ringflow.core.layout import RingLayout
from ringflow.search.plan import plan_generation
from ringflow.search.session import SESSION_MARK, settle_killed_session
from ringflow.workflow import cluster
from ringtools import locked_ring, make_candidate


def engineering_node(tmp_path):
    make_candidate(tmp_path / "cands" / "a", mean=0.5)
    engineer = engineer_config(tmp_path / "tools", "sleep 600\n", env_pass=[])
    ring = locked_ring(tmp_path, tmp_path / "cands", "sk", engineer=engineer,
                       search=search_config())  # fmt: skip
    (node,) = plan_generation(ring, 0)["nodes"]
    return ring, node


def left_box(ring, node: str, run_py: str | None):
    """The box a killed session job left: its mark and its workspace."""
    box = RingLayout(ring).boxes / "0123abcd"
    (box / "workspace").mkdir(parents=True)
    atomic_write_json(box / SESSION_MARK, {"ring": str(ring), "node": node,
                                           "started_at": time.time() - 90})  # fmt: skip
    if run_py is not None:
        (box / "workspace" / "run.py").write_text(run_py)
    return box


def test_a_killed_sessions_runnable_workspace_is_submitted(tmp_path):
    ring, node = engineering_node(tmp_path)
    box = left_box(ring, node, "print(1)\n")
    record = settle_killed_session(ring, node, "41", JobEnd("TIMEOUT", "0:0"))
    assert record["status"] == "interrupted" and record["slurm_state"] == "TIMEOUT"
    assert record["slurm_job_id"] == "41" and record["node_status"] == "ready"
    assert "the engineer rule's runtime" in record["reason"]
    folder = ring / "nodes" / node
    assert json.loads((folder / "session.json").read_text()) == record
    assert json.loads((folder / "node.json").read_text())["status"] == "ready"
    assert (folder / "solution" / "run.py").read_text() == "print(1)\n"
    assert not box.exists()  # its holder is gone: the box goes once settled


def test_a_killed_session_without_a_program_rejects_its_node_with_slurms_reason(tmp_path):
    ring, node = engineering_node(tmp_path)
    record = settle_killed_session(ring, node, "42", JobEnd("OUT_OF_MEMORY", "0:125"))
    assert record["status"] == "crash" and record["node_status"] == "rejected"
    error = json.loads((ring / "nodes" / node / "node.json").read_text())["error"]
    assert error.startswith("memory limit (SLURM's") and "no runnable program" in error
    # Settled once: asked again, the record stands.
    again = settle_killed_session(ring, node, "43", JobEnd("CANCELLED"))
    assert again == record


def test_another_rings_box_is_not_taken_for_the_sessions(tmp_path):
    ring, node = engineering_node(tmp_path)
    other = left_box(ring, node, "print(1)\n")
    atomic_write_json(other / SESSION_MARK, {"ring": str(ring) + "-other", "node": node,
                                             "started_at": time.time()})  # fmt: skip
    record = settle_killed_session(ring, node, "44", JobEnd("NODE_FAIL"))
    assert record["node_status"] == "rejected", record


def test_a_session_slurm_ended_while_no_driver_ran_is_settled_when_the_driver_starts(
    tmp_path, monkeypatch
):
    ring, node = engineering_node(tmp_path)
    # The session's job listed itself as it started, then SLURM ended it unheard.
    assert jobs.record_job(ring, node, None, None, env={"SLURM_JOB_ID": "45"},
                           rule="engineer") == "45"  # fmt: skip
    assert [j["job"] for j in jobs.unfinished_jobs(ring)] == ["45"]
    monkeypatch.setattr(jobs, "query_ends", lambda ids: {"45": JobEnd("NODE_FAIL")})
    (session,) = cluster.settle_jobs_ended_unheard(ring)
    assert session["slurm_state"] == "NODE_FAIL" and session["node_status"] == "rejected"
    assert jobs.unfinished_jobs(ring) == []  # its session.json is the record
    events = [json.loads(x) for x in (ring / "events.jsonl").read_text().splitlines()]
    assert [(e["rule"], e["job"]) for e in events if e["kind"] == "slurm_job_killed"] == [
        ("engineer", "45")
    ]
    # Outside SLURM a session lists nothing.
    assert jobs.record_job(ring, node, None, None, env={}, rule="engineer") is None
