"""The tree's memory as the supervisor sees it where no memory cgroup can be had.

Best effort (docs/limits.md#memory): the anonymous resident memory of every live process
of the tree, plus what the files in each sandbox's private /tmp and /dev/shm hold (a
tmpfs is memory, but belongs to no process's RSS until it is mapped). Shared and
file-backed pages are left out of the per-process figure, so a tmpfs file a program
maps is counted once.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping
from typing import Any

from ..core.settings import Sandbox

PAGE = os.sysconf("SC_PAGE_SIZE")
PRIVATE_TMPFS = ("tmp", "dev/shm")


def anon_rss_bytes(pid: int) -> int:
    """Resident memory of pid that is neither file-backed nor shared (statm)."""
    try:
        with open(f"/proc/{pid}/statm") as handle:
            fields = handle.read().split()
        return max(int(fields[1]) - int(fields[2]), 0) * PAGE
    except (OSError, ValueError, IndexError):
        return 0


def tree_memory_bytes(pids: Iterable[int]) -> int:
    return sum(anon_rss_bytes(pid) for pid in pids)


def _mount_ns(pid: int | str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/mnt").st_ino
    except OSError:
        return None


def private_tmpfs_bytes(pids: Iterable[int]) -> int:
    """Bytes held in /tmp and /dev/shm of every mount namespace of the tree but ours.

    Each sandbox (a mount namespace of its own) is counted once, through the root of
    one of its processes; the supervisor's own namespace is the host's, not counted."""
    own = _mount_ns("self")
    seen: set[int] = set()
    total = 0
    for pid in pids:
        ns = _mount_ns(pid)
        if ns is None or ns == own or ns in seen:
            continue
        seen.add(ns)
        for folder in PRIVATE_TMPFS:
            with contextlib.suppress(OSError):
                vfs = os.statvfs(f"/proc/{pid}/root/{folder}")
                total += (vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize
    return total


def private_tmp_mb(settings: Sandbox, limits: Mapping[str, Any]) -> int:
    """Size of the sandbox's /tmp and of its /dev/shm: sandbox.tmp_mb, but never more than
    the memory limit, whose share they are (docs/limits.md#memory)."""
    size = int(settings.tmp_mb)
    if limits.get("memory_gb") is not None:
        size = min(size, max(int(limits["memory_gb"] * 1024), 16))
    return size
