"""After the driver: remove what a kill of the whole workflow left
(docs/faults.md#debris-of-killed-runs).

A kill of Snakemake's process group takes the supervisors with it, before they can remove
their boxes (a replay's hard links into the store among them). The driver starts this
janitor in a session of its own at onstart; it waits for the driver to exit, however it
exits, then for the boxes' holders to let go, removes what they left, and ends. A kill
that reaches the janitor too (a whole cgroup, a reboot) is cleaned at the ring's next
start instead.

    python -m ringflow.ring.janitor DRIVER_PID SETTLE_S RING_DIR STORE [RING_DIR STORE ...]
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys
import time
from pathlib import Path

POLL_S = 0.5


def start_janitor(rings: list[tuple[Path, Path]], settle_s: float) -> subprocess.Popen | None:
    """Start the janitor for this process's rings ((ring folder, store) pairs)."""
    if not rings:
        return None
    argv = [sys.executable, "-m", "ringflow.ring.janitor", str(os.getpid()), str(settle_s)]
    for ring_dir, store in rings:
        argv += [os.path.abspath(ring_dir), os.path.abspath(store)]
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip


def _wait_for_exit(pid: int) -> None:
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except OSError:
        # No pidfd (an old kernel): poll the process instead.
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(POLL_S)
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while not poller.poll(None):
            pass
    finally:
        os.close(fd)


def clean_after(driver_pid: int, rings: list[tuple[Path, Path]], settle_s: float) -> None:
    from ..weights.store import WeightsStore
    from .boxes import boxes_of, remove_abandoned_boxes

    _wait_for_exit(driver_pid)
    give_up = time.monotonic() + settle_s
    while True:
        left = 0
        for ring_dir, store in rings:
            remove_abandoned_boxes(ring_dir)
            with contextlib.suppress(OSError):
                left += sum(1 for _ in boxes_of(ring_dir).iterdir())
            if (store / "objects").is_dir():
                with contextlib.suppress(OSError):
                    WeightsStore(store).remove_dead_leftovers()
        # Boxes still held belong to supervisors still stopping their programs.
        if not left or time.monotonic() > give_up:
            return
        time.sleep(POLL_S)


def main(argv: list[str]) -> int:
    driver, settle_s, rest = int(argv[0]), float(argv[1]), argv[2:]
    rings = [(Path(rest[i]), Path(rest[i + 1])) for i in range(0, len(rest) - 1, 2)]
    clean_after(driver, rings, settle_s)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
