"""Stopping a ring because the machinery failed (docs/operations.md#recovery-after-a-stop).

A failure of ringflow or of the machine (the sandbox cannot start, the view changed
under the lock, the scorer fails on the baseline or on too many nodes) must not be
recorded as a bad candidate. The first such failure writes `STOPPED.json` with its
reason; every later job refuses to start, so the workflow ends non-zero and the summary
says why. Its `cause` decides how the work goes on (core/recovery.py prints the command):
a machine failure continues the same ring once STOPPED.json is removed; a failing scorer,
changed data or a changed environment continue in a new ring with `continue_from`.

A full disk must not keep the stop from being recorded: each driver keeps a small reserve
file in the ring folder, given up to write STOPPED.json when the disk has no room left.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from .diskspace import is_full_error
from .errors import MachineryError
from .jsonio import atomic_write_json, read_json
from .layout import RingLayout
from .ledger import emit_event

STOP_FILE = "STOPPED.json"
RESERVE = Path(".locks") / "stop-reserve"
RESERVE_BYTES = 64 << 10


def stop_file(ring_dir: str | os.PathLike) -> Path:
    return RingLayout(Path(ring_dir)).stopped


def keep_stop_reserve(ring_dir: str | os.PathLike) -> None:
    """Make sure the ring folder holds the room for a stop record (best effort)."""
    path = Path(ring_dir) / RESERVE
    with contextlib.suppress(OSError):
        if path.is_file() and path.stat().st_size >= RESERVE_BYTES:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            os.pwrite(fd, b"\0" * RESERVE_BYTES, 0)  # written, not sparse: the room is real
            os.fsync(fd)
        finally:
            os.close(fd)


def stop_ring(
    ring_dir: str | os.PathLike, reason: str, cause: str = "machine", **fields
) -> MachineryError:
    """Record why the ring stops (the first reason wins) and its cause (task, data,
    environment or machine: core/recovery.py); returns the error to raise."""
    path = stop_file(ring_dir)
    if not path.exists():
        record = {"reason": reason, "cause": cause, "at": time.time(), **fields}
        try:
            atomic_write_json(path, record)
        except OSError as exc:
            if not is_full_error(exc):
                raise
            (Path(ring_dir) / RESERVE).unlink(missing_ok=True)  # room for the record
            atomic_write_json(path, record)
        with contextlib.suppress(OSError):  # the record is what counts; the event is extra
            emit_event(Path(ring_dir), "ring_stopped", reason=reason, cause=cause, **fields)
    return MachineryError(f"the ring stopped: {reason}")


def stopped_reason(ring_dir: str | os.PathLike) -> str | None:
    path = stop_file(ring_dir)
    if not path.exists():
        return None
    return str(read_json(path).get("reason", "unknown"))


def refuse_if_stopped(ring_dir: str | os.PathLike) -> None:
    """Raise MachineryError when the ring was stopped by a machinery failure."""
    from .recovery import refusal_hint

    reason = stopped_reason(ring_dir)
    if reason is not None:
        raise MachineryError(f"the ring stopped earlier: {reason} ({refusal_hint(ring_dir)})")
