"""A full disk under a whole ring (real Snakemake; the ring folder and the store on a small
filesystem of the test's own, mounted as root): the ring stops with STOPPED.json naming
the filesystem, no training attempt is spent, and no candidate is blamed."""

from __future__ import annotations

import json

import pytest
from test_disk_full import BIG_WEIGHTS

from ringflow.weights.attempts import TrainAttempts
from ringtools import make_candidate, make_task, results, snakemake, write_config
from smallfs import small_filesystem

pytestmark = pytest.mark.e2e


def test_a_ring_whose_disk_runs_full_stops_without_blaming_the_candidate(tmp_path):
    with small_filesystem(tmp_path / "fs", size_mb=48) as disk:
        make_task(tmp_path)
        cands = tmp_path / "cands"
        (make_candidate(cands / "big", mean=0.5, weights=True) / "run.py").write_text(BIG_WEIGHTS)
        config = write_config(tmp_path, ring_id="full", task=str(tmp_path / "task"),
                              candidates=str(cands), baseline=None,
                              runs_dir=str(disk / "runs"), store=str(disk / "store"))  # fmt: skip
        done = snakemake(tmp_path, config, check=False)
        ring = disk / "runs" / "full"
        assert done.returncode != 0
        said = done.stdout + done.stderr
        stopped = json.loads((ring / "STOPPED.json").read_text())
        assert stopped["reason"].startswith("disk full: "), stopped
        assert f"on tmpfs (tmpfs, mounted at {disk})" in stopped["reason"]
        assert " bytes free" in stopped["reason"]
        assert f"the ring {ring} stopped: disk full" in said or "stopped: disk full" in said
        assert "OSError" not in said and "Errno 28" not in said, said[-3000:]
        # No attempt spent: every key may still be trained as often as the ring allows.
        for path in (ring / "keys" / "attempts").glob("*.jsonl"):
            attempts = TrainAttempts(ring, path.stem, "check", limit=1)
            assert attempts.failed(holding_lock=True) == [], path.read_text()
        for result in results(ring).values():
            assert result["status"] not in ("crash", "skipped"), result
        failures = said[said.rfind("failures") :].splitlines()
        assert failures and failures[0].strip() == "failures: none", failures[:5]
