"""A small filesystem of a test's own (a tmpfs with a size), mounted as root: where a test
fills a disk for real."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_filesystem(where: Path, size_mb: int) -> Iterator[Path]:
    """Mount a tmpfs of `size_mb` at `where`; skip (saying why) where that cannot be done."""
    if os.geteuid() != 0:
        pytest.skip("a small filesystem of the test's own needs root to mount it")
    where.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0755",
                              "tmpfs", str(where)], capture_output=True, text=True)  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"could not mount a tmpfs at {where}: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(folder: Path, leave_bytes: int = 0) -> Path:
    """Fill the filesystem of `folder` (a file of its own) until `leave_bytes` are left."""
    filler = folder / "filler.bin"
    st = os.statvfs(folder)
    room = st.f_bavail * st.f_frsize - leave_bytes
    with open(filler, "wb") as handle, contextlib.suppress(OSError):
        while room > 0:
            handle.write(b"\0" * min(room, 1 << 20))
            room -= 1 << 20
    return filler
