"""Deadlines and orphans through real rings (issues: the supervisor, the final reserve)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from ringflow.core.interrupts import EXIT_INTERRUPTED, stopped_by_signal
from ringflow.core.reserve import CutoffFile
from ringtools import (
    locked_ring,
    make_candidate,
    make_task,
    snakemake,
    start_snakemake,
    step_argv,
    write_config,
)

pytestmark = pytest.mark.e2e

# Ignores SIGTERM and leaves a setsid grandchild that ignores it too; both carry a marker
# in their command line so the test can find every process of the tree.
STUBBORN = """\
import os, signal, sys, time
marker = open("marker.txt").read().strip()
if marker not in sys.argv:
    os.execv(sys.executable, [sys.executable, "run.py", *sys.argv[1:], marker])
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c",
                 "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                 "time.sleep(300)", marker])
    os._exit(0)
time.sleep(300)
"""


def marked(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if marker in (proc.info["cmdline"] or []):
            found.append(proc)
    return found


def wait_until(predicate, timeout: float, step: float = 0.2) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


def stubborn_candidate(folder: Path, marker: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "run.py").write_text(STUBBORN)
    (folder / "marker.txt").write_text(marker + "\n")
    return folder


def recorded(ring: Path) -> list[Path]:
    return list(ring.glob("nodes/*/exec/*/s0/result.json"))


def test_killing_snakemake_leaves_no_process_of_the_execution(tmp_path):
    marker = f"ringflow-orphan-{os.getpid()}-{time.time_ns()}"
    task = make_task(tmp_path)
    stubborn_candidate(tmp_path / "cands" / "stubborn", marker)
    config = write_config(
        tmp_path,
        ring_id="orphan",
        task=str(task),
        candidates=str(tmp_path / "cands"),
        baseline=None,
    )
    driver = start_snakemake(tmp_path, config)
    try:
        assert wait_until(lambda: len(marked(marker)) >= 2, 60), "the program never started"
        driver.kill()
        driver.wait()
        grace = 2  # exec_health.term_grace_s of ringtools.FAST
        assert wait_until(lambda: not marked(marker), grace + 8), (
            f"left alive: {[p.pid for p in marked(marker)]}"
        )
        # The supervisor records after the tree is gone; it shares the killed driver's
        # process group, so give it time to write before the cleanup below kills that group.
        assert wait_until(lambda: recorded(tmp_path / "runs" / "orphan"), 30), (
            "the supervisor recorded nothing"
        )
    finally:
        for proc in marked(marker):
            proc.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver.pid, signal.SIGKILL)
    results = recorded(tmp_path / "runs" / "orphan")
    for path in results:
        result = json.loads(path.read_text())
        assert result["status"] == "interrupted" and result["budget_cut"] is False
        assert "orphan" in result["reason"]


def test_an_earlier_cutoff_shortens_a_running_execution_and_a_lock_wait(tmp_path):
    cands = tmp_path / "cands"
    # Identical trees share one weights key: the first trains (slowly) under the key lock,
    # the second waits for that lock.
    for name in ("twin-a", "twin-b"):
        make_candidate(cands / name, mean=0.5, weights=True, sleep=120, ignore_term=True)
    ring = locked_ring(tmp_path, cands, "cut")
    index = json.loads((ring / "nodes" / "index.json").read_text())
    nodes = [n["id"] for n in index["nodes"]]
    run = [sys.executable, "-m", "ringflow", "step", "execute", str(ring)]
    first = subprocess.Popen([*run, nodes[0], "proxy", "s0"])
    exec_a = ring / "nodes" / nodes[0] / "exec" / "proxy" / "s0"
    assert wait_until(lambda: (exec_a / "health" / "health_latest.json").exists(), 30)
    second = subprocess.Popen([*run, nodes[1], "proxy", "s0"])
    exec_b = ring / "nodes" / nodes[1] / "exec" / "proxy" / "s0"
    # Its box (working copy) is made before it waits for the weights lock.
    assert wait_until(lambda: len(list((ring.parent / ".boxes").iterdir())) == 2, 30)
    time.sleep(1)
    moved_at = time.time()
    assert CutoffFile(ring / "cutoff.json").move_earlier(moved_at + 1, why="test")
    for proc in (first, second):
        proc.wait(timeout=20)
    ended = time.time()
    assert ended - moved_at <= 1 + 2 + 4  # the new cutoff, the grace, slack
    a = json.loads((exec_a / "result.json").read_text())
    b = json.loads((exec_b / "result.json").read_text())
    assert a["status"] == "interrupted" and a["budget_cut"] and a["weights_mode"] == "train"
    assert b["status"] == "interrupted" and b["budget_cut"]
    assert "weights lock" in b["reason"]
    # Nothing was registered: the cut trainer is not a finished training.
    assert not list((tmp_path / "store" / "per_view").glob("*/*.json"))


def test_a_signal_while_waiting_for_the_weights_lock_is_an_interruption_not_a_cut(tmp_path):
    cands = tmp_path / "cands"
    for name in ("twin-a", "twin-b"):  # one key: the first trains under its lock
        make_candidate(cands / name, mean=0.5, weights=True, sleep=120, ignore_term=True)
    ring = locked_ring(tmp_path, cands, "sig")
    nodes = [n["id"] for n in json.loads((ring / "nodes" / "index.json").read_text())["nodes"]]
    run = [sys.executable, "-m", "ringflow", "step", "execute", str(ring)]
    first = subprocess.Popen([*run, nodes[0], "proxy", "s0"])
    try:
        exec_a = ring / "nodes" / nodes[0] / "exec" / "proxy" / "s0"
        assert wait_until(lambda: (exec_a / "health" / "health_latest.json").exists(), 30)
        second = subprocess.Popen([*run, nodes[1], "proxy", "s0"])
        assert wait_until(lambda: len(list((ring.parent / ".boxes").iterdir())) == 2, 30)
        time.sleep(1)  # waiting for the lock
        sent = time.time()
        second.send_signal(signal.SIGTERM)
        # Told alone, while its ring goes on: a failed job, so the ring stops there.
        assert second.wait(timeout=20) == EXIT_INTERRUPTED
        assert time.time() - sent < 5
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=30)
    b = json.loads(
        (ring / "nodes" / nodes[1] / "exec" / "proxy" / "s0" / "result.json").read_text()
    )
    assert b["status"] == "interrupted" and b["budget_cut"] is False
    assert "SIGTERM" in b["reason"] and "weights lock" in b["reason"]
    assert stopped_by_signal(b)  # it runs again when the ring runs again


def test_the_reserve_moves_the_cutoff_earlier_and_it_survives_a_restart(tmp_path):
    cands = tmp_path / "cands"
    make_candidate(cands / "slow", mean=0.6, sleep=4)
    make_candidate(tmp_path / "base" / "baseline", mean=0.5)
    task = make_task(tmp_path)
    timeline = {"duration_min": 30, "final_reserve_min": 1, "reserve_pad_min": 3}
    config = write_config(
        tmp_path,
        ring_id="reserve",
        task=str(task),
        candidates=str(cands),
        baseline=str(tmp_path / "base" / "baseline"),
        timeline=timeline,
    )
    ring = tmp_path / "runs" / "reserve"
    driver = start_snakemake(tmp_path, config)
    try:
        assert wait_until(lambda: any(ring.glob("nodes/*/exec/*/s0/score.json")), 120)
        lock = json.loads((ring / "RING.json").read_text())
        # The cutoff starts final_reserve_min before stop_at and only ever moves earlier: the
        # ring's own timekeeper may have moved it already (a busy machine).
        initial = lock["stop_at"] - 60
        before = CutoffFile(ring / "cutoff.json").cutoff()
        assert before <= initial + 1e-3
        tick = subprocess.run(
            [sys.executable, "-m", "ringflow", "reserve", "--json", str(ring)],
            capture_output=True,
            text=True,
            check=True,
        )
        moved = json.loads(tick.stdout)
        assert moved["reserve_min"] >= 3
        after = CutoffFile(ring / "cutoff.json").cutoff()
        # Moved by this tick, or by the ring's own timekeeper before it.
        assert after <= before and after < initial
        assert after >= lock["start"] + (lock["stop_at"] - lock["start"]) / 2
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    time.sleep(3)  # the orphaned supervisors stop their trees
    snakemake(tmp_path, config, "--unlock")
    snakemake(tmp_path, config)
    assert json.loads((ring / "RING.json").read_text())["start"] == lock["start"]
    assert CutoffFile(ring / "cutoff.json").cutoff() <= after
    assert (ring / "selection" / "decision.json").exists()
    # A finished ring is immutable: the timekeeper neither moves nor records anything more.
    recorded = (ring / "cutoff.json").read_bytes()
    again = json.loads(
        subprocess.run(
            [sys.executable, "-m", "ringflow", "reserve", "--json", str(ring)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert again == {"moved": False, "reason": "the ring has ended"}
    assert (ring / "cutoff.json").read_bytes() == recorded


CHECKPOINTER = """\
import os, signal, sys, time
out = os.environ["RINGFLOW_OUTPUT_DIR"]
def last_words(signum, frame):
    time.sleep(0.5)  # a checkpoint takes a moment to write
    with open(os.path.join(out, "checkpoint.txt"), "w") as f:
        f.write("complete\\n")
    sys.exit(0)
signal.signal(signal.SIGTERM, last_words)
open(os.path.join(out, "started"), "w").close()
time.sleep(300)
"""


def test_a_sandboxed_program_writes_its_checkpoint_within_the_grace(tmp_path):
    cands = tmp_path / "cands"
    (cands / "saver").mkdir(parents=True)
    (cands / "saver" / "run.py").write_text(CHECKPOINTER)
    ring = locked_ring(tmp_path, cands, "grace")
    run = step_argv("execute", str(ring), "n001-saver", "proxy", "s0")
    proc = subprocess.Popen(run)
    exec_dir = ring / "nodes" / "n001-saver" / "exec" / "proxy" / "s0"
    # The program writes into its box's output; it lands in exec_dir/output when it ends.
    assert wait_until(lambda: any(ring.parent.glob(".boxes/*/output/started")), 30)
    assert CutoffFile(ring / "cutoff.json").move_earlier(time.time(), why="test")
    proc.wait(timeout=20)
    result = json.loads((exec_dir / "result.json").read_text())
    assert result["status"] == "interrupted" and result["budget_cut"]
    assert result["sandbox"]["mode"] == ("root" if os.geteuid() == 0 else "userns")
    assert (exec_dir / "output" / "checkpoint.txt").read_text() == "complete\n"
