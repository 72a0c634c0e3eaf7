"""A full disk under a whole ring (real Snakemake; the ring folder and the store on a small
filesystem of the test's own, mounted as root): the ring stops with STOPPED.json naming
the filesystem, no training attempt is spent, and no candidate is blamed; once room is
freed, the command the ring printed (docs/recovery.md) finishes the same ring."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ringflow.weights.attempts import TrainAttempts
from ringtools import make_candidate, make_task, results, snakemake, write_config
from smallfs import fill, small_filesystem

pytestmark = pytest.mark.e2e

WEIGHTS_MB = 4
# Trains weights of a fixed size: they fit the workcopy but not the store beside a filler,
# and fit both once the filler is gone.
FIXED_WEIGHTS = f"""\
import json, os
if not os.path.exists("weights/model.txt"):  # trained once, replayed after
    with open("weights/model.txt", "wb") as f:
        f.write(b"w" * ({WEIGHTS_MB} << 20))
with open(os.path.join(os.environ["RINGFLOW_OUTPUT_DIR"], "score.json"), "w") as f:
    json.dump({{"value": 0.5}}, f)
"""


def _printed_recovery(said: str) -> str:
    """The one command the ring printed to continue it (the line after 'run:')."""
    lines = said.splitlines()
    heads = [i for i, line in enumerate(lines) if line.endswith("to continue this ring, run:")]
    assert heads, said[-3000:]
    command = lines[heads[-1] + 1]
    assert command.startswith("    rm "), command
    return command.strip()


def _assert_stopped_for_the_disk(ring: Path, disk: Path, said: str) -> None:
    stopped = json.loads((ring / "STOPPED.json").read_text())
    assert stopped["reason"].startswith("disk full: "), stopped
    assert f"on tmpfs (tmpfs, mounted at {disk})" in stopped["reason"]
    assert " bytes free" in stopped["reason"]
    assert f"the ring {ring} stopped: disk full" in said or "stopped: disk full" in said
    assert "OSError" not in said and "Errno 28" not in said, said[-3000:]
    # No attempt spent: every key may still be trained as often as the ring allows.
    for path in (ring / "keys" / "attempts").glob("*.jsonl"):
        attempts = TrainAttempts(ring, path.stem, "check", limit=1)
        assert attempts.failed() == [], path.read_text()
    for result in results(ring).values():
        assert result["status"] not in ("crash", "skipped"), result
    failures = said[said.rfind("failures") :].splitlines()
    assert failures and failures[0].strip() == "failures: none", failures[:5]


def test_a_ring_whose_disk_runs_full_stops_and_the_printed_command_finishes_it(tmp_path):
    with small_filesystem(tmp_path / "fs", size_mb=48) as disk:
        make_task(tmp_path)
        cands = tmp_path / "cands"
        (make_candidate(cands / "big", mean=0.5, weights=True) / "run.py").write_text(FIXED_WEIGHTS)
        # A baseline without weights, so that the finished ring decides and writes final/.
        base = make_candidate(tmp_path / "base", mean=0.3)
        config = write_config(tmp_path, ring_id="full", task=str(tmp_path / "task"),
                              candidates=str(cands), baseline=str(base), promote_top_k=1,
                              guard={"enabled": False, "seeds": 2, "alpha": 0.05, "margin": 0.0},
                              runs_dir=str(disk / "runs"), store=str(disk / "store"))  # fmt: skip
        # Room for one copy of the weights (in the workcopy), not for the store's second one.
        filler = fill(disk, leave_bytes=(WEIGHTS_MB + 2) << 20)
        done = snakemake(tmp_path, config, check=False)
        ring = disk / "runs" / "full"
        assert done.returncode != 0
        said = done.stdout + done.stderr
        _assert_stopped_for_the_disk(ring, disk, said)
        command = _printed_recovery(said)

        filler.unlink()  # the user frees room, then pastes what the ring printed
        again = subprocess.run(command, shell=True, executable="/bin/bash",
                               capture_output=True, text=True, timeout=900)  # fmt: skip
        assert again.returncode == 0, f"{command}\n{again.stdout[-3000:]}\n{again.stderr[-6000:]}"
        assert not (ring / "STOPPED.json").exists()
        solution = ring / "final" / "solution"
        assert (solution / "weights" / "model.txt").is_file(), again.stdout[-3000:]
        verified = subprocess.run([sys.executable, "-m", "ringflow", "verify", str(ring)],
                                  capture_output=True, text=True, timeout=300)  # fmt: skip
        assert verified.returncode == 0, verified.stdout + verified.stderr
        statuses = {result["status"] for result in results(ring).values()}
        assert statuses == {"ok"}, statuses
