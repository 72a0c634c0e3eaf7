"""A full disk is the machine's failure: the ring stops with the filesystem named, no
training attempt is spent, no candidate is blamed, and the supervisor survives failed
writes of its own records (a small filesystem of the test's own, mounted as root)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ringflow.core import statuses
from ringflow.core.stop import keep_stop_reserve
from ringflow.supervisor import HealthSettings, ResourceLimits, supervise
from ringflow.weights.attempts import TrainAttempts
from ringtools import locked_ring, make_candidate, results
from smallfs import fill, small_filesystem

# Fills its output folder until the disk refuses, then fails as any program would.
FILL_OUTPUT = """\
import os
with open(os.path.join(os.environ["RINGFLOW_OUTPUT_DIR"], "big.bin"), "wb") as f:
    while True:
        f.write(b"x" * (1 << 20))
"""
# Trains weights that fill 60% of the room left: the store's copy of them cannot fit.
BIG_WEIGHTS = """\
import json, os
room = os.statvfs("weights").f_bavail * os.statvfs("weights").f_frsize
with open("weights/model.txt", "wb") as f:
    f.write(b"w" * int(room * 0.6))
with open(os.path.join(os.environ["RINGFLOW_OUTPUT_DIR"], "score.json"), "w") as f:
    json.dump({"value": 0.5}, f)
"""


@pytest.fixture
def small_disk(tmp_path):
    with small_filesystem(tmp_path / "fs", size_mb=48) as where:
        yield where


def _execute(ring: Path, node: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ringflow", "step", "execute", str(ring), node,
                           "proxy", "s0"], capture_output=True, text=True, timeout=300)  # fmt: skip


def _attempt_lines(ring: Path) -> list[str]:
    return [line for path in (ring / "keys" / "attempts").glob("*.jsonl")
            for line in path.read_text().splitlines()]  # fmt: skip


def _ring_on(disk: Path, cands: Path, ring_id: str) -> Path:
    # The ring folder and the store on the small disk; task and candidates elsewhere.
    return locked_ring(disk.parent, cands, ring_id, runs_dir=str(disk / "runs"),
                       store=str(disk / "store"))  # fmt: skip


def test_weights_that_do_not_fit_the_store_stop_the_ring_without_spending_an_attempt(
    tmp_path, small_disk
):
    cands = tmp_path / "cands"
    (make_candidate(cands / "big", mean=0.5, weights=True) / "run.py").write_text(BIG_WEIGHTS)
    ring = _ring_on(small_disk, cands, "full")
    done = _execute(ring, "n001-big")
    assert done.returncode != 0
    stopped = json.loads((ring / "STOPPED.json").read_text())
    assert stopped["reason"].startswith("disk full: store/ on tmpfs (tmpfs, mounted at "), stopped
    assert str(small_disk) in stopped["reason"] and " bytes free" in stopped["reason"]
    assert "the ring stopped" in done.stderr and "Traceback" not in done.stderr
    assert results(ring) == {}, "a machine's failure is no candidate's result"
    assert _attempt_lines(ring) == [], "the attempt was withdrawn"
    assert not list((small_disk / "store").glob("objects/.incoming-*"))
    assert not list((small_disk / "store").glob("per_view/*/*.json"))
    assert not any((ring.parent / ".boxes").iterdir()), "the box was removed"


def test_a_program_that_fills_the_disk_is_not_blamed_for_it(tmp_path, small_disk):
    cands = tmp_path / "cands"
    (make_candidate(cands / "fill", mean=0.5, weights=True) / "run.py").write_text(FILL_OUTPUT)
    ring = _ring_on(small_disk, cands, "fill")
    done = _execute(ring, "n001-fill")
    assert done.returncode != 0
    reason = json.loads((ring / "STOPPED.json").read_text())["reason"]
    boxes = ring.parent / ".boxes"
    assert reason.startswith(f"disk full: the program's output ({boxes}/) on tmpfs"), reason
    assert "while running n001-fill proxy/s0" in reason
    assert results(ring) == {}
    assert _attempt_lines(ring) == []
    # Every later job refuses at once with the reason.
    again = _execute(ring, "n001-fill")
    assert again.returncode != 0 and "the ring stopped earlier: disk full" in again.stderr


def test_a_withdrawn_attempt_is_not_counted(tmp_path):
    attempts = TrainAttempts(tmp_path, "k" * 64, "n001-a/proxy/s0", limit=1)
    attempts.started()
    attempts.ended("crash")
    before = attempts.path.read_bytes()
    second = TrainAttempts(tmp_path, "k" * 64, "n001-a/x3/s0", limit=2)
    second.started()
    assert second.withdraw()
    assert attempts.path.read_bytes() == before, "only the withdrawn attempt went"
    assert [f["outcome"] for f in second.failed()] == ["crash"]
    assert not second.withdraw(), "withdrawn once"


def test_the_supervisor_survives_failing_writes_of_its_own_records(tmp_path):
    with small_filesystem(tmp_path / "fs", size_mb=4) as disk:
        (disk / "health").mkdir()
        fill(disk)
        outcome = supervise(
            [sys.executable, "-c",
             "import sys, time\nfor _ in range(64): print('x' * 65536)\ntime.sleep(1)"],
            cwd=tmp_path, env=dict(os.environ), stdout_path=disk / "stdout.log",
            stderr_path=disk / "stderr.log", health_dir=disk / "health",
            settings=HealthSettings(collect_s=0.2, interval_s=0.4, term_grace_s=1),
            limits=ResourceLimits(time_limit_min=2), watch_ancestors=False,
        )  # fmt: skip
    assert outcome.status == statuses.OK, outcome.reason
    names = [event["event"] for event in outcome.events]
    assert "health_write_failed" in names and "log_write_failed" in names, names
    log = next(e for e in outcome.events if e["event"] == "log_write_failed")
    assert log["log"] == "stdout.log" and "No space left" in log["error"]
    assert log["dropped_bytes"] > 0


def test_any_ring_step_that_meets_a_full_disk_stops_the_ring(tmp_path, small_disk):
    cands = tmp_path / "cands"
    make_candidate(cands / "a", mean=0.5)
    ring = _ring_on(small_disk, cands, "steps")
    keep_stop_reserve(ring)  # as the driver does when it starts
    filler = fill(small_disk)
    # `ringflow summary --write` writes into the full ring folder.
    done = subprocess.run([sys.executable, "-m", "ringflow", "summary", str(ring), "--write",
                           str(ring / "summary.txt")], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "disk full: " in done.stderr and "tmpfs (tmpfs, mounted at" in done.stderr
    filler.unlink()
    stopped = json.loads((ring / "STOPPED.json").read_text())
    assert stopped["reason"].startswith(f"disk full: {ring}"), stopped
    assert f"on tmpfs (tmpfs, mounted at {small_disk})" in stopped["reason"]
    assert stopped["reason"].endswith("(in `ringflow summary`)")
