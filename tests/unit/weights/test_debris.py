"""No debris: a killed registration's temporary file and a killed run's box are removed once
their holder is gone (by its flock, never by age), and with the box go a replay's hard
links into the store."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ringflow.ring.boxes import close_box, open_box, remove_abandoned_boxes
from ringflow.weights.store import WeightsStore
from ringflow.workflow.hooks import remove_debris
from ringtools import PROGRAM, locked_ring, make_candidate, ring_config

# A registration whose copy takes long (as a large one does): it stays inside the store's
# own registration, its `.incoming-*` file made and held, until the test kills it.
REGISTERING = """\
import sys, time
from pathlib import Path
from ringflow.weights import store
copy = store._copy_hashing
def slow_copy(source, fd):
    print("copying", flush=True)
    time.sleep(600)
    return copy(source, fd)
store._copy_hashing = slow_copy
store.WeightsStore(sys.argv[1])._store_object(Path(sys.argv[2]))
"""
HOLD_BOX = """\
import sys, time
from ringflow.ring.boxes import open_box
box, _fd = open_box(sys.argv[1])
print(box, flush=True)
time.sleep(600)
"""


@pytest.fixture
def children():
    started: list[subprocess.Popen] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _wait_for(predicate, what: str, timeout: float = 60) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


def test_a_killed_registration_leaves_a_file_removed_once_its_owner_is_gone(tmp_path, children):
    store = WeightsStore(tmp_path / "store")
    weights = tmp_path / "model.bin"
    weights.write_bytes(b"weights" * 1000)
    proc = subprocess.Popen([sys.executable, "-c", REGISTERING, str(store.root), str(weights)],
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    children.append(proc)
    assert proc.stdout.readline().strip() == "copying"
    (leftover,) = store.leftovers()
    assert leftover.name.startswith(".incoming-")
    os.utime(leftover, (0, 0))  # however old it looks, its owner lives
    removed, in_use = store.remove_dead_leftovers()
    assert removed == [] and in_use == [leftover] and leftover.exists()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert leftover.exists(), "a kill leaves the file behind"
    removed, in_use = store.remove_dead_leftovers()
    assert removed == [leftover] and in_use == [] and not leftover.exists()


def test_a_killed_runs_box_is_removed_and_a_live_ones_is_kept(tmp_path, children):
    ring = tmp_path / "runs" / "r1"
    mine, held = open_box(ring)
    proc = subprocess.Popen([sys.executable, "-c", HOLD_BOX, str(ring)], stdout=subprocess.PIPE,
                            text=True)  # fmt: skip
    children.append(proc)
    theirs = Path(proc.stdout.readline().strip())
    (theirs / "output").mkdir()
    assert remove_abandoned_boxes(ring) == [], "both holders live"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert remove_abandoned_boxes(ring) == [theirs] and not theirs.exists()
    assert mine.exists()
    close_box(mine, held)
    assert not mine.exists()


def _store_inodes(store: Path) -> set[tuple[int, int]]:
    return {(st.st_dev, st.st_ino) for st in map(os.stat, (store / "objects").iterdir())}


def _links_into(ring: Path, store: Path) -> list[Path]:
    """Hard links into the store's objects in the ring folder or in its runs' boxes."""
    objects = _store_inodes(store)
    found = []
    walked = [*os.walk(ring), *os.walk(ring.parent / ".boxes")]
    for dirpath, _dirs, files in walked:
        for name in files:
            try:
                st = os.lstat(Path(dirpath) / name)
            except FileNotFoundError:
                continue  # removed while we looked (the janitor at work)
            if (st.st_dev, st.st_ino) in objects:
                found.append(Path(dirpath) / name)
    return found


def test_a_replay_killed_mid_run_leaves_no_link_into_the_store_after_the_next_start(tmp_path):
    cands = tmp_path / "cands"
    cand = make_candidate(cands / "a", mean=0.5, weights=True, sleep=120)
    # Seed 1 replays what seed 0 trained, and sleeps; seed 0 is quick.
    slow_seed_1 = 'time.sleep(b.get("sleep", 0) * (a.seed == 1))'
    (cand / "run.py").write_text(PROGRAM.replace('time.sleep(b.get("sleep", 0))', slow_seed_1))
    ring = locked_ring(tmp_path, cands, "links")
    store = tmp_path / "store"

    def execute(variant: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "ringflow", "step", "execute", str(ring),
                                 "n001-a", "proxy", variant], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip

    assert execute("s0").wait(timeout=300) == 0
    s0 = json.loads((ring / "nodes/n001-a/exec/proxy/s0/result.json").read_text())
    assert s0["weights_mode"] == "train" and s0["status"] == "ok"
    replay = execute("s1")
    try:
        health = ring / "nodes/n001-a/exec/proxy/s1/health/health_latest.json"
        _wait_for(health.exists, "the replaying run", timeout=120)
        assert _links_into(ring, store), "a live replay holds hard links into the store"
    finally:
        os.killpg(replay.pid, signal.SIGKILL)  # the supervisor and everything of its job
        replay.wait()
    assert _links_into(ring, store), "a kill leaves the box, links and all"
    remove_debris(ring, ring_config(store=str(store)))  # what the ring's next start does
    assert _links_into(ring, store) == []
    assert not any((ring.parent / ".boxes").iterdir())


def test_verify_reports_a_dead_registrations_leftover_but_not_a_live_one(tmp_path):
    from ringflow.weights.store import _owned_temp

    store = WeightsStore(tmp_path / "store")
    fd, live = _owned_temp(store.objects, ".incoming-")
    try:
        dead = store.objects / ".incoming-killed"
        dead.write_bytes(b"half a copy")
        problems = store.verify()
        assert any(dead.name in p for p in problems)
        assert not any(live.name in p for p in problems), problems
    finally:
        os.close(fd)
