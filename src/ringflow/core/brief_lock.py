"""File locks around records that are held for milliseconds: the ledger, the store's
anchors, the hash memo.

filelock waits for a lock by trying again every `poll_interval` seconds, 50 ms unless
told otherwise. These locks are held for one append and its fsync (a few milliseconds),
and every execution takes four of them, two executions at a time on a small machine: a
waiter that sleeps 50 ms behind a 3 ms hold idles a core for the rest of the sleep. A
try costs one `flock` call, so these waiters try every 2 ms instead
(docs/benchmarks.md#what-durability-costs).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from filelock import FileLock

BRIEF_POLL_S = 0.002


def brief_lock(path: str | os.PathLike) -> FileLock:
    """A lock on `path` for a hold of milliseconds."""
    # Imported here: some callers' modules are imported by every step, few of which lock.
    from filelock import FileLock

    return FileLock(os.fspath(path), poll_interval=BRIEF_POLL_S)
