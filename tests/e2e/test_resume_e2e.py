"""A ring killed at every stage and resumed with `--unlock` and the same command reaches the
decision an uninterrupted ring reaches, with the same executions, none twice, none missing.

Both rings run the same deterministic programs on their own store (so their guard seeds
are the same). The killed ring is killed (SIGKILL to Snakemake's whole process group)
after the lock, in the search, in promotion, once ranked, in the guard, after the first
verdict and after the decision, then resumed each time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ringtools import (
    make_candidate,
    make_task,
    results,
    snakemake,
    snakemake_argv,
    write_config,
)

pytestmark = pytest.mark.e2e

# Where each kill lands: the first file that shows the ring is in that stage (then 1.5 s
# of work in flight), at the boundaries between stages and inside them.
STAGES = [
    ("import, after the lock", "RING.json"),
    ("search", "nodes/n002-good/exec/proxy/s0/score.json"),
    ("promotion", "selection/promotion.json"),
    ("ranked, the seat and review under way", "selection/ranking.json"),
    ("guard", "selection/review-n002-good.json"),
    ("after the first verdict", "selection/verdict-1.json"),
    ("after the decision", "selection/decision.json"),
]


def _workdir(root: Path) -> tuple[Path, Path]:
    root.mkdir(parents=True)
    task = make_task(root, roles={"search": ["proxy", "x3"], "guard": ["guard"],
                                  "final": "final"})  # fmt: skip
    cands = root / "cands"
    # Seed noise of its own for the baseline, so the guard's paired differences spread.
    make_candidate(root / "baseline", mean=0.50, sd=0.01, sleep=1, noise_key="baseline")
    make_candidate(cands / "good", mean=0.70, sd=0.01, sleep=1, weights=True)
    make_candidate(cands / "fair", mean=0.55, sleep=1)
    make_candidate(cands / "poor", mean=0.30, sleep=1)
    config = write_config(root, ring_id="r", task=str(task), candidates=str(cands),
                          baseline=str(root / "baseline"), store=str(root / "store"),
                          terminal={"progress_s": 0})  # fmt: skip
    return root, config


# When each kill was sent (time.time()), in the order sent.
KILLS: list[float] = []
# An execution that ends this long before a kill may not be recorded by Snakemake yet.
RECORDING_S = 10.0


def _kill_when(workdir: Path, config: Path, marker: Path, timeout_s: float = 600) -> bool:
    """Start the ring; once `marker` exists, wait a moment (work in flight) and kill the
    whole process group. False if the ring ended before the marker appeared."""
    proc = subprocess.Popen(snakemake_argv(workdir, config), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + timeout_s
    while not marker.exists():
        if proc.poll() is not None:
            return False
        assert time.monotonic() < deadline, f"{marker} never appeared"
        time.sleep(0.1)
    time.sleep(1.5)
    KILLS.append(time.time())
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    return True


def _outcome(ring: Path) -> dict:
    decision = json.loads((ring / "selection" / "decision.json").read_text())
    runs = results(ring)
    scores = {}
    for node, view, variant in runs:
        path = ring / "nodes" / node / "exec" / view / variant / "score.json"
        scores[(node, view, variant)] = json.loads(path.read_text()).get("score")
    return {
        "decision": (decision["decision"], decision.get("chosen")),
        "executions": sorted(runs),
        "statuses": {k: r["status"] for k, r in runs.items()},
        "scores": scores,
    }


def test_a_ring_killed_at_every_stage_reaches_the_uninterrupted_decision(tmp_path):
    reference, ref_config = _workdir(tmp_path / "reference")
    snakemake(reference, ref_config)
    expected = _outcome(reference / "runs" / "r")
    assert expected["decision"] == ("candidate", "n002-good"), expected["decision"]

    killed, config = _workdir(tmp_path / "killed")
    ring = killed / "runs" / "r"
    landed = []
    for stage, marker in STAGES:
        if _kill_when(killed, config, ring / marker):
            landed.append(stage)
        snakemake(killed, config, "--unlock")
    assert landed == [stage for stage, _ in STAGES]
    snakemake(killed, config)

    got = _outcome(ring)
    assert got["decision"] == expected["decision"]
    assert got["executions"] == expected["executions"]
    assert "interrupted" not in got["statuses"].values()
    assert got["scores"] == expected["scores"]
    # Each guard and promotion run is recorded once in the ledger (none ran twice to the end).
    ledger = [json.loads(line) for line in (ring / "ledger.jsonl").read_text().splitlines()]
    decided = [e for e in ledger if e["kind"] == "final_decided"]
    assert len(decided) == 1
    # No execution ran to its end twice, but one that ended in the moments around a kill:
    # before Snakemake recorded its job as done, or just after the kill, its step (in a
    # session of its own, held by the driver's resident server) writing the records of a
    # program that had ended. Snakemake runs that job again.
    events = [json.loads(line) for line in (ring / "events.jsonl").read_text().splitlines()]
    finished = [e for e in events if e["kind"] == "execution_finished" and e["status"] == "ok"]
    runs = [(e["node"], e["view"], e["variant"]) for e in finished]
    assert sorted(set(runs)) == expected["executions"]
    for again in {run for run in runs if runs.count(run) > 1}:
        first = next(e for e in finished if (e["node"], e["view"], e["variant"]) == again)
        assert any(abs(kill - first["ts"]) <= RECORDING_S for kill in KILLS), (again, first, KILLS)
