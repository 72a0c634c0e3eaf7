"""Evidence of a cut engineer session in a whole ring: the ring executes the session's
program and seals its evidence (docs/recovery.md)."""

from __future__ import annotations

import pytest
from test_carryover_engineer_e2e import run_ring_and_cut
from test_carryover_evidence import PROGRAM_SH, read

from engtools import engineer_config, search_config
from ringflow.carryover.seal import seal_problems
from ringflow.verify import verify_ring
from ringtools import make_candidate, make_task, write_config


@pytest.mark.e2e
def test_a_ring_executes_the_program_of_a_cut_session_and_seals_its_evidence(tmp_path):
    task = make_task(tmp_path)
    make_candidate(tmp_path / "cands" / "a", mean=0.5)
    config = write_config(tmp_path, ring_id="a", task=str(task),
                          candidates=str(tmp_path / "cands"), baseline=None,
                          engineer=engineer_config(tmp_path / "tools", PROGRAM_SH),
                          search=search_config(max_nodes=2))  # fmt: skip
    ring, draft = tmp_path / "runs" / "a", "n002-draft-g0"
    run_ring_and_cut(tmp_path, config, ring, draft)

    session = read(ring / "nodes" / draft / "session.json")
    assert session["status"] == "cut" and session["budget_cut"] and session["runnable"]
    # Executed at once, as any node: its seed-0 runs on the search views ran to the end.
    node = read(ring / "nodes" / draft / "node.json")
    assert node["status"] == "ready", node
    result = read(ring / "nodes" / draft / "exec" / "proxy" / "s0" / "result.json")
    assert result["status"] == "ok", result
    # Sealed only as evidence.
    evidence = ring / "nodes" / draft / "evidence"
    assert seal_problems(evidence, read(evidence / "SEAL.json")) == []
    assert (evidence / "solution" / "run.py").read_bytes() == (
        ring / "nodes" / draft / "solution" / "run.py"
    ).read_bytes()
    assert read(evidence / "HANDOFF.json")["evidence"] is True
    assert not (ring / "nodes" / draft / "carryover").exists()
    manifest = read(ring / "stop_manifest.json")
    assert manifest["seals"] == []
    assert [(e["identity"], e["snapshot"]) for e in manifest["evidence"]] == [
        (f"a#{draft}", f"nodes/{draft}/evidence")
    ]
    summary = (ring / "summary.txt").read_text()
    assert f"{draft} -> nodes/{draft}/evidence" in summary
    assert verify_ring(ring) == []
