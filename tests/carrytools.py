"""Rings with work cut by the cutoff, for the carryover tests: a candidate whose seed-0 run
is really started and cut (it writes a checkpoint during the grace), or cut before it
starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from ringflow.core.reserve import CutoffFile
from ringtools import locked_ring, make_candidate

# Trains until stopped; on SIGTERM it writes a checkpoint and partial output (the grace).
SLOW = """\
import os, pathlib, signal, sys, time
out = pathlib.Path(os.environ["RINGFLOW_OUTPUT_DIR"])
def stop(signum, frame):
    pathlib.Path("weights/ckpt.txt").write_text("epoch 3 of 10\\n")
    (out / "partial.txt").write_text("half done\\n")
    sys.exit(143)
signal.signal(signal.SIGTERM, stop)
os.symlink("ckpt.txt", "weights/latest")
(out / "started.txt").write_text("started\\n")
time.sleep(300)
"""


def slow_candidate(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "run.py").write_text(SLOW)
    (folder / "ARTIFACTS.json").write_text(json.dumps([{"path": "weights/model.txt",
                                                        "per_view": True}]))  # fmt: skip
    return folder


def run_execution(ring: Path, node: str, view: str = "proxy", variant: str = "s0"):
    return subprocess.Popen(
        [sys.executable, "-m", "ringflow", "step", "execute", str(ring), node, view, variant],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def wait_for(path: Path, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.2)


def cut_running(ring: Path, node: str, view: str = "proxy") -> dict:
    """Start the node's seed-0 run on `view`, move the cutoff to now once it runs; its
    result."""
    proc = run_execution(ring, node, view)
    wait_for(ring / "nodes" / node / "exec" / view / "s0" / "health" / "health_latest.json")
    time.sleep(0.5)
    CutoffFile(ring / "cutoff.json").move_earlier(time.time(), why="test")
    assert proc.wait(timeout=60) == 0
    return json.loads((ring / "nodes" / node / "exec" / view / "s0" / "result.json").read_text())


def cut_before_start(ring: Path, node: str, view: str = "proxy") -> dict:
    """The cutoff has passed: the seed-0 run is cut before it starts."""
    CutoffFile(ring / "cutoff.json").move_earlier(time.time() - 1, why="test")
    assert run_execution(ring, node, view).wait(timeout=60) == 0
    return json.loads((ring / "nodes" / node / "exec" / view / "s0" / "result.json").read_text())


def ring_with_cut(work: Path, ring_id: str = "a", names=("slow",), running: bool = False,
                  **overrides) -> Path:  # fmt: skip
    """A locked ring over the scripted task whose candidates' seed-0 runs were cut."""
    cands = work / "cands"
    for name in names:
        if not (cands / name).exists():
            if running:
                slow_candidate(cands / name)
            else:
                make_candidate(cands / name, mean=0.5, label=name)
    ring = locked_ring(work, cands, ring_id, **overrides)
    for number, _name in enumerate(names, start=1):
        node = next(p.name for p in (ring / "nodes").glob(f"n{number:03d}-*"))
        (cut_running if running else cut_before_start)(ring, node)
    return ring


def ledger_records(ring: Path, kind: str) -> list[dict]:
    lines = (ring / "ledger.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


def env_without(*names: str) -> dict:
    return {k: v for k, v in os.environ.items() if k not in names}
