"""A ring on a machine without bubblewrap: programs still run as the unprivileged user,
staged where it can reach them; only network isolation is lost, and the ring says so once."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ringtools import make_candidate, make_task, results, snakemake, write_config

pytestmark = pytest.mark.e2e

# The sandbox user cannot reach an interpreter installed under /root (pyenv); without
# bubblewrap nothing can bind it in, so these candidates name the system's Python.
SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin:/bin")


@pytest.mark.skipif(SYSTEM_PYTHON is None, reason="no system python3 in /usr/bin or /bin")
def test_a_ring_runs_in_user_only_mode(tmp_path):
    cands = tmp_path / "cands"
    for name, weights in (("plain", False), ("trained", True)):
        folder = make_candidate(
            cands / name, mean=0.7 if weights else 0.6, sd=0.01, weights=weights
        )
        execution = {"command": [SYSTEM_PYTHON, "run.py"], "train_seed": 0}
        (folder / "EXECUTION.json").write_text(json.dumps(execution))
    base = make_candidate(tmp_path / "base" / "baseline", mean=0.5, sd=0.01, noise_key="base")
    (base / "EXECUTION.json").write_text(json.dumps({"command": [SYSTEM_PYTHON, "run.py"]}))
    config = write_config(
        tmp_path,
        ring_id="plain-user",
        task=str(make_task(tmp_path)),
        candidates=str(cands),
        baseline=str(base),
        sandbox={"mode": "user-only"},
    )
    snakemake(tmp_path, config)
    ring = tmp_path / "runs" / "plain-user"
    res = results(ring)
    assert {r["sandbox"]["mode"] for r in res.values() if "sandbox" in r} == {"user-only"}
    assert all(r["status"] == "ok" for r in res.values())
    trained = {
        v: r["weights_mode"]
        for (n, view, v), r in res.items()
        if n == "n002-trained" and view == "proxy"
    }
    assert trained["s0"] == "train" and trained["s1"] == "replay" and trained["g3"] == "replay"
    events = [json.loads(x) for x in (ring / "events.jsonl").read_text().splitlines()]
    notices = [e for e in events if e["kind"] == "sandbox_degraded"]
    assert len(notices) == 1 and "network" in " ".join(notices[0]["notes"])
    final = json.loads((ring / "final" / "FINAL.json").read_text())
    assert final["decision"] == "candidate" and final["chosen"] == "n002-trained"
    # The program's files came back and belong to the ring's owner again.
    output = ring / "nodes" / "n001-plain" / "exec" / "proxy" / "s0" / "output" / "score.json"
    assert output.stat().st_uid == Path(ring).stat().st_uid
