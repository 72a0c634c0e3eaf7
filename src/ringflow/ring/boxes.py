"""Boxes: one folder of neutral paths per running program (its working copy, its output, a
replay's read-only hard links into the store), in `runs/.boxes/` beside the rings so that
the paths a program's mount table shows name no ring (docs/isolation.md).

A box is held with an flock on its folder by the process that made it, and removed when
its run ends. A run killed before it could remove its box leaves it behind; the ring's
next start and its end remove every box whose holder is gone, so no hard link into the
store's `objects/` outlives the runs (docs/faults.md#debris-of-killed-runs).
"""

from __future__ import annotations

import fcntl
import os
import secrets
from pathlib import Path

from ..core.layout import RingLayout
from ..core.safetree import remove_tree


def boxes_of(ring_dir: str | os.PathLike) -> Path:
    """Where the ring's runs make their boxes (shared with the other rings of runs/)."""
    return RingLayout(Path(ring_dir)).boxes


def open_box(ring_dir: str | os.PathLike) -> tuple[Path, int]:
    """(a new box, the descriptor holding its flock): pass both to `close_box`."""
    boxes = boxes_of(ring_dir)
    boxes.mkdir(parents=True, exist_ok=True)
    while True:
        box = boxes / secrets.token_hex(8)
        box.mkdir(mode=0o755)
        fd = os.open(box, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            ours = os.fstat(fd).st_ino == os.lstat(box).st_ino
        except FileNotFoundError:
            ours = False
        if ours:
            return box, fd
        os.close(fd)  # removed as abandoned before our flock: make another


def close_box(box: Path | None, fd: int | None) -> None:
    """Remove a box, then give up its flock."""
    try:
        if box is not None:
            _remove(box)
    finally:
        if fd is not None:
            os.close(fd)


def _remove(box: Path) -> None:
    if box.is_dir() and not box.is_symlink():
        remove_tree(box, ignore_errors=True)  # any depth or names a program left
    else:
        box.unlink(missing_ok=True)


def remove_abandoned_boxes(ring_dir: str | os.PathLike) -> list[Path]:
    """Remove every box whose holder is gone (a killed run's); returns what was removed."""
    boxes = boxes_of(ring_dir)
    if not boxes.is_dir():
        return []
    removed = []
    for box in sorted(boxes.iterdir()):
        try:
            fd = os.open(box, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except FileNotFoundError:
            continue
        except OSError:
            _remove(box)  # not a folder a run could hold (a link, a stray file)
            removed.append(box)
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a live run's box
            _remove(box)
            removed.append(box)
        finally:
            os.close(fd)
    return removed
