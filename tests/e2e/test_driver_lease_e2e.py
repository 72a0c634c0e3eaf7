"""One driver per ring, with real Snakemake: after `--unlock`, the same command started while
the first driver lives is refused with the holder named, and the first ring goes on."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

import pytest

from ringflow.ring.lease import lease_path
from ringtools import gated_ring, snakemake, start_snakemake

pytestmark = pytest.mark.e2e

# Seed 0 on proxy sleeps until GATE (an epoch fixed at creation); every other run is quick.
SLOW = """\
import argparse, json, os, time
p = argparse.ArgumentParser()
p.add_argument("--seed", type=int, default=0)
p.add_argument("--ablate", action="store_true")
a = p.parse_args()
data = open(os.path.join(os.environ["RINGFLOW_INPUT_DIR"], "data.txt")).read().strip()
if data == "data of proxy" and not a.ablate and a.seed == 0:
    while time.time() < GATE:
        time.sleep(0.2)
with open(os.path.join(os.environ["RINGFLOW_OUTPUT_DIR"], "score.json"), "w") as f:
    json.dump({"value": 0.6}, f)
"""
GATE_AFTER_S = 120


def _finished(ring: Path) -> int:
    path = ring / "events.jsonl"
    if not path.exists():
        return 0
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    return sum(1 for line in lines if line["kind"] == "execution_finished")


def _wait_in_flight(exec_dir: Path, timeout: float = 150) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if (exec_dir / "health" / "health_latest.json").exists():
            return
        time.sleep(0.2)
    raise AssertionError(f"{exec_dir} never ran")


def test_a_second_driver_is_refused_after_unlock_while_the_first_lives(tmp_path):
    config, ring = gated_ring(tmp_path, SLOW, GATE_AFTER_S)
    first = start_snakemake(tmp_path, config)
    try:
        _wait_in_flight(ring / "nodes" / "n001-slow" / "exec" / "proxy" / "s0")
        record = json.loads(lease_path(ring).read_text())
        assert record["pid"] == first.pid and "released_at" not in record

        # A dry run does not drive the ring: it neither takes nor needs the lease.
        dry = snakemake(tmp_path, config, "--dry-run", check=False, timeout=300)
        assert dry.returncode == 0 and "driven by another" not in dry.stdout + dry.stderr
        # Snakemake's own lock refuses the second driver; its advice lifts that lock only.
        snakemake(tmp_path, config, "--unlock")
        before = _finished(ring)
        second = snakemake(tmp_path, config, check=False, timeout=300)
        assert second.returncode != 0
        said = second.stdout + second.stderr
        assert "is driven by another Snakemake" in said, said[-3000:]
        assert f"PID {first.pid}" in said and "since " in said
        assert _finished(ring) == before, "the refused driver ran executions"
        assert json.loads(lease_path(ring).read_text())["pid"] == first.pid

        # The first driver goes on undisturbed and ends the ring.
        assert first.wait(timeout=GATE_AFTER_S + 400) == 0
    finally:
        if first.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(first.pid, signal.SIGKILL)
            first.wait()
    result = json.loads((ring / "nodes" / "n001-slow" / "exec" / "proxy" / "s0" /
                         "result.json").read_text())  # fmt: skip
    assert result["status"] == "ok"
    assert json.loads(lease_path(ring).read_text())["released_at"] > 0
