"""The demo chain (`make demo`, config/chain.yaml): ring 1 carries an engineer session and an
execution over its cutoff; ring 2 verifies, resumes and finishes both, and its summary says
so.

The chain takes minutes: with RINGFLOW_DEMO_CHAIN_DIR naming a folder where `make demo` has
run (CI does, as an ordinary user), the test checks that chain instead of running its own.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from ringtools import REPO, SNAKEMAKE

_chain: Path | None = None


def _demo_chain(tmp_path: Path) -> Path:
    """The demo chain's working folder: RINGFLOW_DEMO_CHAIN_DIR, or one run of the chain
    per test session (the browser test of the report opens the same chain)."""
    global _chain
    given = os.environ.get("RINGFLOW_DEMO_CHAIN_DIR")
    if given:
        return Path(given)
    if _chain is not None:
        return _chain
    # No configuration file: the demo chain is what the workflow defines.
    argv = [str(SNAKEMAKE), "-s", str(REPO / "Snakefile"), "--directory", str(tmp_path),
            "--profile", str(REPO / "profiles" / "local"), "--cores", "2", "ring2"]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    _chain = tmp_path
    return tmp_path


def _nodes(ring: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(ring.glob("nodes/*/node.json"))]


@pytest.mark.e2e
def test_the_demo_chain_carries_work_over_and_resumes_it(tmp_path):
    work = _demo_chain(tmp_path)
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
