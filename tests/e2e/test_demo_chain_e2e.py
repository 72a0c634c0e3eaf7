"""The demo chain (`make demo`, config/chain.yaml): ring 1 carries an engineer session and an
execution over its cutoff; ring 2 verifies, resumes and finishes both, and its summary says
so.

The chain takes minutes: with RINGFLOW_DEMO_CHAIN_DIR naming a folder where `make demo` has
run (CI does, as an ordinary user), the test checks that chain instead of running its own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ringtools import finished_demo_chain

# Building the demo chain (time-boxed rings, minutes) counts toward the test that needs it first.
pytestmark = pytest.mark.timeout(1800)


def _nodes(ring: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(ring.glob("nodes/*/node.json"))]


@pytest.mark.e2e
@pytest.mark.user
def test_the_demo_chain_carries_work_over_and_resumes_it():
    work = finished_demo_chain()
    first, second = work / "runs" / "demo", work / "runs" / "demo-2"
    for ring in (first, second):
        assert (ring / "stop_manifest.json").is_file()
        assert (ring / "final" / "solution").is_dir()

    # Ring 1: engineer-made nodes beside the static candidates; the cutoff cut one session
    # without a program and one execution, both sealed.
    origins = {n["origin"]["kind"] for n in _nodes(first) if n.get("origin")}
    assert {"draft", "improve"} & origins
    seals = json.loads((first / "carryover" / "seals.json").read_text())["seals"]
    kinds = {seal["kind"]: seal["identity"] for seal in seals}
    assert set(kinds) == {"engineer", "execution"}, seals
    summary = (first / "summary.txt").read_text()
    assert "carried out: 2 piece(s) of work sealed" in summary

    # Ring 2 continues ring 1, verifies both seals and resumes both before anything new.
    lock = json.loads((second / "RING.json").read_text())
    assert lock["chain"]["continues"] == "demo"
    imported = json.loads((second / "carryover" / "imported.json").read_text())
    assert set(imported["queue"]) == set(kinds.values()) and not imported["rejected"]
    resumed = {n["origin"]["identity"]: n for n in _nodes(second)
               if (n.get("origin") or {}).get("kind") == "resume"}  # fmt: skip
    assert set(resumed) == set(kinds.values())
    for node in resumed.values():
        assert node["resume_origin"]["segments"][0]["ring"] == "demo"
        assert node["status"] == "ready", node  # finished this time
    # The re-executed program ran to the end in ring 2.
    execution = resumed[kinds["execution"]]
    result = json.loads((second / "nodes" / execution["id"] / "exec" / "proxy" / "s0" /
                         "result.json").read_text())  # fmt: skip
    assert result["status"] == "ok", result
    summary = (second / "summary.txt").read_text()
    assert "carried in: 2 sealed piece(s) of work verified, 0 rejected" in summary
    for identity in kinds.values():
        assert identity in summary
