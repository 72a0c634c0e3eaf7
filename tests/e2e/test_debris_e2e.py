"""No debris after a kill of the whole workflow (real Snakemake): SIGKILL to the driver's
process group while a replay runs leaves no hard link into the store in the ring folder,
and no box, once the kill has settled; the janitor that cleaned up ends too."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import psutil
import pytest
from test_debris import _links_into

from ringtools import PROGRAM, make_candidate, make_task, start_snakemake, write_config

pytestmark = pytest.mark.e2e


def _wait_for(predicate, what: str, timeout: float) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"never happened within {timeout} s: {what}")


def _janitors(ring: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "ringflow.ring.janitor" in cmdline and str(ring) in cmdline:
            found.append(proc)
    return found


def test_a_killed_workflow_leaves_no_link_into_the_store(tmp_path):
    make_task(tmp_path)
    cand = make_candidate(tmp_path / "cands" / "a", mean=0.6, weights=True, sleep=300)
    slow_seed_1 = 'time.sleep(b.get("sleep", 0) * (a.seed == 1))'
    (cand / "run.py").write_text(PROGRAM.replace('time.sleep(b.get("sleep", 0))', slow_seed_1))
    guard = {"enabled": False, "seeds": 5, "alpha": 0.05, "margin": 0.0}
    config = write_config(tmp_path, ring_id="k1", task=str(tmp_path / "task"),
                          candidates=str(tmp_path / "cands"), baseline=None,
                          guard=guard)  # fmt: skip
    ring, store = tmp_path / "runs" / "k1", tmp_path / "store"
    driver = start_snakemake(tmp_path, config)
    try:
        s1 = ring / "nodes" / "n001-a" / "exec" / "proxy" / "s1"
        _wait_for((s1 / "health" / "health_latest.json").exists, "the replay of s1", 300)
        assert (s1.parent / "s0" / "result.json").exists(), "s1 replays what s0 trained"
        assert _links_into(ring, store), "a live replay holds hard links into the store"
        assert _janitors(ring), "the driver started its janitor"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    _wait_for(lambda: not _links_into(ring, store), "the killed replay's links removed", 90)
    _wait_for(lambda: not any((ring.parent / ".boxes").iterdir()), "every box removed", 90)
    _wait_for(lambda: not _janitors(ring), "the janitor ended", 90)
