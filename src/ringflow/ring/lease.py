"""One driver per ring: a lease of ringflow's own that Snakemake's `--unlock` does not lift.

The Snakemake process that drives a ring (the one that runs the workflow's onstart hook)
holds `runs/<ring>/.locks/driver.lease` with `flock` until it exits. The file records who
holds it (host, PID, since when), so a second driver of the same ring is refused with the
holder named. The kernel drops the flock when its holder dies, however it dies: a lease
whose record names a holder but whose flock is free is stale, and is taken over with a line
saying so. Jobs run by Snakemake never take the lease (only onstart does), and dry runs,
`--lint` and `--unlock` never reach onstart.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import socket
import time
from pathlib import Path

from ..core.errors import RingflowError

LEASE_FILE = "driver.lease"


class LeaseHeld(RingflowError):
    """Another driver holds the ring's lease: nothing of this invocation runs."""


def lease_path(ring_dir: str | os.PathLike) -> Path:
    return Path(ring_dir) / ".locks" / LEASE_FILE


def _when(ts: object) -> str:
    if not isinstance(ts, int | float):
        return "an unknown time"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


def describe_holder(record: dict) -> str:
    """ "host H, PID P, since T" for a lease record."""
    return (
        f"host {record.get('host', '?')}, PID {record.get('pid', '?')}, "
        f"since {_when(record.get('since'))}"
    )


def _read_record(fd: int) -> dict | None:
    raw = os.pread(fd, 1 << 16, 0)
    if not raw.strip():
        return None
    try:
        record = json.loads(raw)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def _write_record(fd: int, record: dict) -> None:
    data = (json.dumps(record, sort_keys=True) + "\n").encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)
    os.fsync(fd)


class DriverLease:
    """The lease of one ring, held by this process once `acquire` returned."""

    def __init__(self, ring_dir: str | os.PathLike):
        self.ring_dir = Path(ring_dir)
        self.path = lease_path(ring_dir)
        self.fd: int | None = None

    def acquire(self, command: str = "") -> str | None:
        """Take the lease; raise LeaseHeld naming the holder. Returns the line to print when
        a stale lease was taken over, else None."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Not O_TRUNC: the file must keep the holder's record while someone else looks.
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            record = _read_record(fd)
            os.close(fd)
            who = describe_holder(record) if record else "a driver that is just starting"
            raise LeaseHeld(
                f"the ring {self.ring_dir} is driven by another Snakemake ({who}; lease "
                f"{self.path}): wait for it to end or stop it, then run this command again. "
                "Snakemake's --unlock does not lift this lease; a lease whose holder is gone "
                "is taken over by itself"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        previous = _read_record(fd)
        record = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "since": time.time(),
            "command": command,
        }
        try:
            _write_record(fd, record)
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd
        if previous is None or previous.get("released_at") is not None:
            return None
        return (
            f"ringflow: the ring {self.ring_dir}: took over the driver lease of "
            f"{describe_holder(previous)}: that driver is gone"
        )

    def release(self) -> None:
        """Give the lease back, leaving a record that it was released (not stale)."""
        if self.fd is None:
            return
        fd, self.fd = self.fd, None
        try:
            record = _read_record(fd) or {}
            record["released_at"] = time.time()
            _write_record(fd, record)
        except OSError:
            pass  # a full disk: the next driver reads the lease as stale, which is harmless
        finally:
            os.close(fd)


def driver_now(ring_dir: str | os.PathLike) -> tuple[str, dict | None]:
    """Whether a driver runs the ring now, read from its lease's record without taking any
    lock (a status in a loop must never make a starting driver's lease fail): ("running",
    record) for a live process of this host, ("elsewhere", record) for another host's,
    whose process cannot be checked from here, ("none", record or None) otherwise."""
    try:
        fd = os.open(lease_path(ring_dir), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return "none", None
    try:
        record = _read_record(fd)
    finally:
        os.close(fd)
    if record is None or record.get("released_at") is not None:
        return "none", record
    if record.get("host") != socket.gethostname():
        return "elsewhere", record
    pid = record.get("pid")
    try:
        alive = isinstance(pid, int) and pid > 0 and os.kill(pid, 0) is None
    except PermissionError:
        alive = True  # another user's live process
    except OSError:
        alive = False
    return ("running" if alive else "none"), record


_HELD: dict[Path, DriverLease] = {}


def hold_leases(ring_dirs: list[Path], command: str = "") -> list[str]:
    """Take the lease of every ring an invocation drives, or none of them (LeaseHeld).
    Returns the takeover lines to print. Leases stay held until `release_leases` or exit."""
    notes: list[str] = []
    taken: list[DriverLease] = []
    try:
        for ring_dir in sorted({Path(d) for d in ring_dirs}):
            key = Path(os.path.abspath(ring_dir))
            if key in _HELD:
                continue
            lease = DriverLease(ring_dir)
            note = lease.acquire(command)
            taken.append(lease)
            _HELD[key] = lease
            if note:
                notes.append(note)
    except BaseException:
        for lease in taken:
            lease.release()
            _HELD.pop(Path(os.path.abspath(lease.ring_dir)), None)
        raise
    return notes


def release_leases() -> None:
    while _HELD:
        _key, lease = _HELD.popitem()
        lease.release()


atexit.register(release_leases)
