"""Which memory limit ended a program: ringflow's own, an enclosing cgroup's (SLURM's job
included) or the machine's (docs/faults.md#memory-kills).

A program killed by the kernel's OOM killer only shows "killed by signal 9" (or exit code
137 through a wrapper). The kernel counts OOM kills per memory cgroup and for the whole
machine; the counters read before the program starts and after it ends say which limit
it met.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from .cgroup import UNLIMITED_V1, Mount, OwnedCgroup, _int, _join, _keyed, _read, own_cgroup_paths
from .cgroup import read_mounts as _read_mounts

KILLED_CODES = (137, -9)  # SIGKILL, seen directly or through a shell or bubblewrap
# How programs say an allocation failed: Python (and numpy's _ArrayMemoryError), C's
# strerror(ENOMEM), C++'s std::bad_alloc, PyTorch's and other allocators' own words.
ALLOCATION_FAILED = re.compile(
    rb"MemoryError|[Cc]annot allocate memory|can't allocate memory|[Uu]nable to allocate"
    rb"|bad_alloc|[Oo]ut of memory|[Ff]ailed to allocate|[Aa]llocation failed"
)
STDERR_TAIL = 64 * 1024


def allocation_failed(stderr_log: str | os.PathLike) -> bool:
    """Whether the end of a program's stderr says an allocation failed: where no memory
    cgroup could be had, RLIMIT_DATA refuses the allocation past the limit, and the
    program's crash is then the limit's doing."""
    return stderr_says(stderr_log, ALLOCATION_FAILED)


def stderr_says(stderr_log: str | os.PathLike, words: re.Pattern[bytes]) -> bool:
    """Whether the last STDERR_TAIL bytes of a program's stderr match `words`."""
    try:
        with open(stderr_log, "rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - STDERR_TAIL))
            return words.search(handle.read()) is not None
    except OSError:
        return False


def machine_oom_kills(vmstat: str = "/proc/vmstat") -> int | None:
    return _keyed(_read(vmstat), "oom_kill")


def _memory_folders(mounts: list[Mount], paths: dict[str, str]) -> list[tuple[str, str]]:
    """(version, folder) of the memory cgroups this process lies in, innermost first."""
    found: list[tuple[str, str]] = []
    for mount in mounts:
        if mount.fstype == "cgroup2" and "" in paths:
            base = _join(mount, paths[""])
            if "memory" not in (_read(os.path.join(mount.mountpoint, "cgroup.controllers")) or ""):
                continue
            version, path = "v2", paths[""]
        elif mount.fstype == "cgroup" and "memory" in mount.superopts and "memory" in paths:
            base = _join(mount, paths["memory"])
            version, path = "v1", paths["memory"]
        else:
            continue
        folder = base
        for _ in range(path.strip("/").count("/") + 1):
            found.append((version, folder))
            if os.path.normpath(folder) == os.path.normpath(mount.mountpoint):
                break
            folder = os.path.dirname(folder)
    return found


def _limit_hits(version: str, folder: str) -> int | None:
    """How often this cgroup's own limit was reached: the kernel counts an OOM kill in the
    victim's cgroup whichever limit caused it, so the kill counter alone cannot tell."""
    if version == "v2":
        return _keyed(_read(os.path.join(folder, "memory.events")), "oom")
    return _int(_read(os.path.join(folder, "memory.failcnt")))


def _limit_bytes(version: str, folder: str) -> int | None:
    if version == "v2":
        text = (_read(os.path.join(folder, "memory.max")) or "").strip()
        return None if text in ("", "max") else _int(text)
    limit = _int(_read(os.path.join(folder, "memory.limit_in_bytes")))
    return None if limit is None or limit >= UNLIMITED_V1 else limit


def _gb(count: int) -> str:
    return f"{count / 1024**3:.3g} GB"


def _own_folder(cgroup: OwnedCgroup) -> tuple[str, str] | None:
    if cgroup.memory.get("enforced") and cgroup.v1_memory_path:
        return "v1", cgroup.v1_memory_path
    if cgroup.memory.get("enforced") and cgroup.v2_path:
        return "v2", cgroup.v2_path
    return None


@dataclass
class MemoryWatch:
    """Counters at a program's start; `reason` compares them at its end."""

    own_hits: int = 0
    own_kills: int = 0
    enclosing_hits: dict[str, tuple[str, int]] = field(default_factory=dict)
    machine_kills: int | None = None

    @classmethod
    def start(cls, cgroup: OwnedCgroup) -> MemoryWatch:
        own = _own_folder(cgroup)
        watch = cls(
            own_hits=(_limit_hits(*own) or 0) if own else 0,
            own_kills=cgroup.oom_kills() or 0,
            machine_kills=machine_oom_kills(),
        )
        try:
            folders = _memory_folders(_read_mounts(), own_cgroup_paths())
        except OSError:
            folders = []
        for version, folder in folders:
            hits = _limit_hits(version, folder)
            if hits is not None and _limit_bytes(version, folder) is not None:
                watch.enclosing_hits[folder] = (version, hits)
        return watch

    def reason(self, cgroup: OwnedCgroup, memory_gb: float | None) -> str | None:
        """ "memory limit (…)" when the run met a memory limit and an OOM kill, else None."""
        own = _own_folder(cgroup)
        if own and (_limit_hits(*own) or 0) > self.own_hits:
            size = f"{memory_gb:g} GB" if memory_gb is not None else "own"
            return f"memory limit (ringflow's {size}, limits.memory_gb): killed by the OOM killer"
        for folder, (version, before) in self.enclosing_hits.items():
            after = _limit_hits(version, folder)
            if after is None or after <= before:
                continue
            size = _gb(_limit_bytes(version, folder) or 0)
            if "slurm" in folder or "SLURM_JOB_ID" in os.environ:
                job = os.environ.get("SLURM_JOB_ID")
                owner = f"SLURM's {size}" + (f" for job {job}" if job else "")
            else:
                owner = f"the cgroup's {size}, {folder}"
            return f"memory limit ({owner}): killed by the OOM killer"
        machine = machine_oom_kills()
        killed = (cgroup.oom_kills() or 0) > self.own_kills or (
            self.machine_kills is not None and machine is not None and machine > self.machine_kills
        )
        if killed:
            return "memory limit (the machine's: it ran out of memory): killed by the OOM killer"
        return None
