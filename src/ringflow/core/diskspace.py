"""A full disk is the machine's failure, never a candidate's (docs/faults.md#disk-full).

Which filesystem is full, and how much room is left, said in the words the ring's stop
record uses: "disk full: store/ on /dev/sdb1 (ext4, mounted at /data), 0 bytes free".
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
# Free room below this on a filesystem a failed program wrote to: the disk, not the
# program, is why it failed (a program that fills a disk ends with a few blocks left).
NEARLY_FULL_BYTES = 1 << 20


def is_full_error(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in FULL_ERRNOS


def free_bytes(path: str | os.PathLike) -> int | None:
    """Bytes an unprivileged writer (the sandboxed program) can still use, or None."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def filesystem(path: str | os.PathLike, mountinfo: str = "/proc/self/mountinfo") -> str:
    """ "<source> (<type>, mounted at <mount point>)" of the filesystem holding path."""
    real = os.path.realpath(path)
    best: tuple[str, str, str] | None = None
    try:
        with open(mountinfo) as handle:
            for line in handle:
                left, _, right = line.partition(" - ")
                fields, tail = left.split(), right.split()
                if len(fields) < 5 or len(tail) < 2:
                    continue
                point = fields[4].replace("\\040", " ")
                if (real == point or real.startswith(point.rstrip("/") + "/")) and (
                    best is None or len(point) >= len(best[0])
                ):
                    best = (point, tail[0], tail[1])
    except OSError:
        pass
    if best is None:
        return f"the filesystem of {real}"
    point, fstype, source = best
    return f"{source} ({fstype}, mounted at {point})"


def full_message(label: str, path: str | os.PathLike) -> str:
    free = free_bytes(path)
    room = "an unknown number of bytes" if free is None else f"{free} bytes"
    return f"disk full: {label} on {filesystem(path)}, {room} free"


def nearly_full(areas: dict[str, Path]) -> str | None:
    """The label of the first area (label -> folder) whose filesystem is all but full."""
    for label, path in areas.items():
        free = free_bytes(path)
        if free is not None and free < NEARLY_FULL_BYTES:
            return label
    return None


def area_of(path: str | None, areas: dict[str, Path]) -> str | None:
    """The label of the area holding path (the longest folder that contains it)."""
    if not path:
        return None
    real = os.path.realpath(path)
    found = None
    for label, folder in areas.items():
        base = os.path.realpath(folder)
        if (real == base or real.startswith(base.rstrip("/") + "/")) and (
            found is None or len(base) > len(os.path.realpath(areas[found]))
        ):
            found = label
    return found
