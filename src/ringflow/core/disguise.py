"""Disguised copies of search views for the view-blind check (docs/operations.md#final-selection).

A copy is made once per ring; each run then reads a fresh copy of it in its own box, made
as every run's inputs are (ring/run_inputs.py), so how the files were made tells nothing.
"""

from __future__ import annotations

import hashlib
import random
import shutil
from pathlib import Path

from filelock import FileLock

from .jsonio import atomic_write_bytes
from .layout import RingLayout
from .state import Ring

# The view-blind runs and the disguised copy each one gets (docs/guard.md#view-blind-check:
# a check and a re-check).
# blind<N>-s0 (N = 3, 4, ...) are the further runs of a flagged program, each on a copy
# of its own (view_blind.extra_runs of them, at most MAX_EXTRA_BLIND).
MAX_EXTRA_BLIND = 32
BLIND_COPIES = {"blind-s0": "disguised", "blind2-s0": "disguised-2"} | {
    f"blind{n}-s0": f"disguised-{n}" for n in range(3, 3 + MAX_EXTRA_BLIND)
}


def alias(ring: Ring, view: str, copy: str = "disguised") -> str:
    """The name a program is given for a view: `view-` and 8 hex digits.

    Every run gets one, real or disguised (`copy` says which: "real", "disguised", or the
    name of a further disguised copy), so that a program cannot tell a view-blind run by
    its name. It is drawn from the ring's `alias_salt`, fresh randomness frozen in the
    lock that no program can read, so neither the ring id nor the view name predicts it.
    """
    return salted_alias(ring.alias_salt or ring.ring_id, view, copy)


def salted_alias(salt: str, view: str, copy: str = "disguised") -> str:
    """`alias` from the salt itself (the lock names the real copies before the ring exists)."""
    digest = hashlib.sha256(f"{salt}/{view}/{copy}".encode()).hexdigest()
    return "view-" + digest[:8]


def _reorder_csv(data: bytes, seed: int) -> bytes:
    """The rows in another order; the same bytes, so the same size as the view's file."""
    lines = data.splitlines(keepends=True)
    if len(lines) < 3:
        return data
    header, rows = lines[0], lines[1:]
    ended = rows[-1].endswith(b"\n")
    if not ended:
        rows[-1] += b"\n"
    random.Random(seed).shuffle(rows)
    reordered = header + b"".join(rows)
    return reordered if ended else reordered[:-1]


def disguised_inputs(ring: Ring, view: str, copy: str = "disguised") -> Path:
    """Same content under another name and path, rows reordered where the task allows it;
    each copy has its own alias and its own row order."""
    layout = RingLayout(Path(ring.ring_dir))
    # Beside the real views' snapshots, under the alias: the same kind of path.
    dest = layout.root / "inputs" / alias(ring, view, copy)
    layout.locks.mkdir(exist_ok=True)
    with FileLock(str(layout.locks / f"disguise-{view}.lock")):
        if dest.is_dir():
            return dest
        source = ring.views[view].snapshot
        staging = dest.with_name(dest.name + ".tmp")
        if staging.exists():
            shutil.rmtree(staging)
        shutil.copytree(source, staging)
        seed = int(hashlib.sha256(alias(ring, view, copy).encode()).hexdigest()[:8], 16)
        for name in ring.task.rows_reordered:
            path = staging / name
            if path.is_file():
                atomic_write_bytes(path, _reorder_csv(path.read_bytes(), seed))
        staging.rename(dest)
    return dest
