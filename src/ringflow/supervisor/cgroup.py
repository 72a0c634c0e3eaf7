"""A cgroup of the execution's own, where the machine lets us create one.

Everything is detected at run time: the cgroup2 mount (often /sys/fs/cgroup, on hybrid
hosts /sys/fs/cgroup/unified), which controllers it offers, and a v1 memory hierarchy.
The child joins before exec (`0` written to `cgroup.procs` in the forked child), so every
descendant, setsid escapees included, is a member. The cgroup2 child gives exact
membership, `cpu.stat` usage including exited processes, and `cgroup.kill`; memory is
limited wherever a memory controller can be had (cgroup2 `memory.max`, else v1
`memory.limit_in_bytes`), and recorded as not enforced, with the reason, otherwise.
"""

from __future__ import annotations

import errno
import os
import re
import time
from dataclasses import dataclass, field

DISABLE_ENV = "RINGFLOW_NO_CGROUP"
# An execution's cgroup is named for its supervisor's pid: ringflow-<pid>-<12 hex>.
OWNED_NAME = re.compile(r"ringflow-(\d+)-[0-9a-f]{12}")
# A supervisor moves its program into its new cgroup within milliseconds; one whose pid
# this process cannot see (another PID namespace) is given this long before its empty
# cgroup counts as abandoned.
ABANDONED_AFTER_S = 60.0
UNLIMITED_V1 = 1 << 62  # v1 reports "no limit" as a huge page-aligned number


@dataclass
class Mount:
    mountpoint: str
    root: str
    fstype: str
    superopts: list[str]


def read_mounts(mountinfo: str = "/proc/self/mountinfo") -> list[Mount]:
    mounts = []
    with open(mountinfo) as handle:
        for line in handle:
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if len(fields) < 5 or len(tail) < 3:
                continue
            mounts.append(Mount(fields[4], fields[3], tail[0], tail[2].split(",")))
    return mounts


def own_cgroup_paths(proc_cgroup: str = "/proc/self/cgroup") -> dict[str, str]:
    """controller (or "" for cgroup2) -> this process's cgroup path."""
    paths: dict[str, str] = {}
    with open(proc_cgroup) as handle:
        for line in handle:
            parts = line.rstrip("\n").split(":", 2)
            if len(parts) != 3:
                continue
            _, controllers, path = parts
            if controllers == "":
                paths[""] = path
            for name in controllers.split(","):
                if name:
                    paths[name] = path
    return paths


def _join(mount: Mount, path: str) -> str:
    if mount.root != "/" and path.startswith(mount.root):
        path = path[len(mount.root) :]
    return os.path.join(mount.mountpoint, path.lstrip("/"))


def _read(path: str) -> str | None:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


def _write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


def _keyed(text: str | None, key: str) -> int | None:
    for line in (text or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            try:
                return int(value)
            except ValueError:
                return None
    return None


@dataclass
class OwnedCgroup:
    """The cgroup folders created for one execution (either may be absent)."""

    v2_path: str | None = None
    v1_memory_path: str | None = None
    v1_pids_path: str | None = None
    memory: dict = field(default_factory=dict)  # what was done about the memory limit
    pids: dict = field(default_factory=dict)  # what was done about the process limit
    notes: list[str] = field(default_factory=list)
    kill_used: bool = False

    @classmethod
    def create(
        cls, name: str, memory_limit_bytes: int | None, pids_limit: int | None = None
    ) -> OwnedCgroup:
        """Create what the machine allows; never raises for an unsupported machine."""
        owned = cls()
        owned.pids = {"limit": pids_limit, "enforced": False}
        if os.environ.get(DISABLE_ENV):
            owned.notes.append(f"cgroups not used: {DISABLE_ENV} is set")
            owned.memory = _memory_record(memory_limit_bytes, False, f"{DISABLE_ENV} is set")
            return owned
        try:
            mounts, paths = read_mounts(), own_cgroup_paths()
        except OSError as exc:
            owned.notes.append(f"cgroups not readable: {exc}")
            owned.memory = _memory_record(memory_limit_bytes, False, "cgroups not readable")
            return owned
        owned._create_v2(mounts, paths, name)
        if owned.v2_path and _has_controller(owned.v2_path, "memory"):
            owned._limit_v2_memory(memory_limit_bytes)
        else:
            owned._create_v1_memory(mounts, paths, name, memory_limit_bytes)
        if pids_limit is not None:
            owned._limit_pids(mounts, paths, name, pids_limit)
        return owned

    def _limit_pids(self, mounts: list[Mount], paths: dict[str, str], name: str, limit: int):
        """pids.max of the cgroup2 child, else of a v1 pids child: counts this tree only."""
        if self.v2_path and _has_controller(self.v2_path, "pids"):
            try:
                _write(os.path.join(self.v2_path, "pids.max"), str(limit))
                self.pids.update(enforced=True, how="cgroup2 pids.max")
                return
            except OSError as exc:
                self.pids["reason"] = f"pids.max not writable: {exc}"
        mount = next((m for m in mounts if m.fstype == "cgroup" and "pids" in m.superopts), None)
        if mount is None or "pids" not in paths:
            self.pids.setdefault("reason", "no pids controller (cgroup2 or v1)")
            return
        target = os.path.join(_join(mount, paths["pids"]), name)
        sweep_abandoned(os.path.dirname(target))
        try:
            os.mkdir(target)
        except OSError as exc:
            self.pids["reason"] = f"cannot create v1 pids cgroup: {exc}"
            return
        try:
            _write(os.path.join(target, "pids.max"), str(limit))
        except OSError as exc:
            _rmdir(target)
            self.pids["reason"] = f"pids.max: {exc}"
            return
        self.v1_pids_path = target
        self.pids.update(enforced=True, how="cgroup v1 pids.max")

    def _create_v2(self, mounts: list[Mount], paths: dict[str, str], name: str) -> None:
        mount = next((m for m in mounts if m.fstype == "cgroup2"), None)
        if mount is None or "" not in paths:
            self.notes.append("no cgroup2 mount: tree found through the subreaper only")
            return
        target = os.path.join(_join(mount, paths[""]), name)
        sweep_abandoned(os.path.dirname(target))
        try:
            os.mkdir(target)
        except OSError as exc:
            self.notes.append(f"cannot create cgroup2 child under {mount.mountpoint}: {exc}")
            return
        self.v2_path = target

    def _limit_v2_memory(self, limit: int | None) -> None:
        assert self.v2_path is not None
        if limit is None:
            self.memory = _memory_record(None, False, "no memory limit configured")
            return
        try:
            _write(os.path.join(self.v2_path, "memory.max"), str(limit))
            _write(os.path.join(self.v2_path, "memory.swap.max"), "0")
        except OSError as exc:
            if not _read(os.path.join(self.v2_path, "memory.max")):
                self.memory = _memory_record(limit, False, f"memory.max not writable: {exc}")
                return
        self.memory = _memory_record(limit, True, "", how="cgroup2 memory.max")

    def _create_v1_memory(
        self, mounts: list[Mount], paths: dict[str, str], name: str, limit: int | None
    ) -> None:
        mount = next((m for m in mounts if m.fstype == "cgroup" and "memory" in m.superopts), None)
        if mount is None or "memory" not in paths:
            self.memory = _memory_record(limit, False, "no memory controller (cgroup2 or v1)")
            return
        target = os.path.join(_join(mount, paths["memory"]), name)
        sweep_abandoned(os.path.dirname(target))
        try:
            os.mkdir(target)
        except OSError as exc:
            self.memory = _memory_record(limit, False, f"cannot create v1 memory cgroup: {exc}")
            return
        self.v1_memory_path = target
        if limit is None:
            self.memory = _memory_record(None, False, "no memory limit configured")
            return
        try:
            _write(os.path.join(target, "memory.limit_in_bytes"), str(limit))
        except OSError as exc:
            self.memory = _memory_record(limit, False, f"memory.limit_in_bytes: {exc}")
            return
        self.memory = _memory_record(limit, True, "", how="cgroup v1 memory.limit_in_bytes")

    def procs_files(self) -> list[str]:
        paths = [self.v1_memory_path, self.v1_pids_path, self.v2_path]
        return [os.path.join(p, "cgroup.procs") for p in paths if p]

    def join_self(self) -> None:
        """Run in the forked child before exec: move it into every owned cgroup.

        Failures are left for `verify_member` to report: the program still runs."""
        for path in self.procs_files():
            try:
                fd = os.open(path, os.O_WRONLY)
                try:
                    os.write(fd, b"0")
                finally:
                    os.close(fd)
            except OSError:
                pass

    def verify_member(self, pid: int) -> None:
        """After start: drop (and note) any cgroup the child did not manage to join."""
        for attr in ("v2_path", "v1_memory_path", "v1_pids_path"):
            path = getattr(self, attr)
            if path and pid not in _pids(os.path.join(path, "cgroup.procs")):
                if _read(f"/proc/{pid}/stat") is None:
                    continue  # already gone: cannot tell, keep the cgroup
                self.notes.append(f"child did not join {path}; not used")
                if attr == "v1_memory_path":
                    self.memory = _memory_record(
                        self.memory.get("limit_bytes"), False, f"child did not join {path}"
                    )
                _rmdir(path)
                setattr(self, attr, None)

    def members(self) -> list[int]:
        found: list[int] = []
        for path in self.procs_files():
            found.extend(_pids(path))
        return found

    def cpu_usage_s(self) -> float | None:
        """Cumulative CPU of every process that was ever a member (exited ones too)."""
        if not self.v2_path:
            return None
        usec = _keyed(_read(os.path.join(self.v2_path, "cpu.stat")), "usage_usec")
        return None if usec is None else usec / 1e6

    def memory_usage(self) -> tuple[int | None, int | None]:
        """(usage bytes, limit bytes or None when unlimited)."""
        if self.v2_path and _has_controller(self.v2_path, "memory"):
            usage = _int(_read(os.path.join(self.v2_path, "memory.current")))
            limit_text = (_read(os.path.join(self.v2_path, "memory.max")) or "").strip()
            return usage, None if limit_text in ("", "max") else _int(limit_text)
        if self.v1_memory_path:
            usage = _int(_read(os.path.join(self.v1_memory_path, "memory.usage_in_bytes")))
            limit = _int(_read(os.path.join(self.v1_memory_path, "memory.limit_in_bytes")))
            return usage, None if limit is None or limit >= UNLIMITED_V1 else limit
        return None, None

    def oom_kills(self) -> int | None:
        if self.v2_path and _has_controller(self.v2_path, "memory"):
            return _keyed(_read(os.path.join(self.v2_path, "memory.events")), "oom_kill")
        if self.v1_memory_path:
            text = _read(os.path.join(self.v1_memory_path, "memory.oom_control"))
            return _keyed(text, "oom_kill")
        return None

    def pids_refused(self) -> int | None:
        """How many new processes and threads the kernel refused at pids.max (the "max"
        count of pids.events), or None where no pids cgroup holds the limit."""
        if not self.pids.get("enforced"):
            return None
        path = self.v1_pids_path or self.v2_path
        return _keyed(_read(os.path.join(path, "pids.events")), "max") if path else None

    @property
    def can_kill(self) -> bool:
        return bool(self.v2_path) and os.path.exists(os.path.join(self.v2_path, "cgroup.kill"))

    def kill(self) -> bool:
        """SIGKILL every member at once through cgroup.kill; False where unavailable."""
        if not self.can_kill:
            return False
        try:
            _write(os.path.join(self.v2_path, "cgroup.kill"), "1")  # type: ignore[arg-type]
        except OSError:
            return False
        self.kill_used = True
        return True

    def remove(self) -> list[str]:
        """rmdir every owned folder; returns the problems (a member that would not die)."""
        problems = []
        for path in (self.v2_path, self.v1_memory_path, self.v1_pids_path):
            if path and not _rmdir(path):
                problems.append(f"could not remove {path}")
        return problems

    def describe(self) -> dict:
        return {
            "owned": bool(self.v2_path or self.v1_memory_path),
            "cgroup2": self.v2_path,
            "memory_v1": self.v1_memory_path,
            "pids_v1": self.v1_pids_path,
            "cpu_accounting": "cgroup2 cpu.stat" if self.v2_path else "proc",
            "kill": "cgroup.kill" if self.can_kill else "signals",
            "kill_used": self.kill_used,
            "notes": list(self.notes),
        }


def _memory_record(limit: int | None, enforced: bool, reason: str, how: str = "") -> dict:
    record: dict = {"limit_bytes": limit, "enforced": enforced}
    if how:
        record["how"] = how
    if reason:
        record["reason"] = reason
    return record


def sweep_abandoned(parent: str, now: float | None = None) -> list[str]:
    """Remove the empty cgroups that supervisors killed outright (SIGKILL, the machine's
    OOM killer) left in `parent`: a supervisor removes its own as it ends, and one killed
    outright cannot. A cgroup stays while its supervisor lives, while anything runs in it
    (rmdir refuses), and for ABANDONED_AFTER_S after it was made. The paths removed."""
    try:
        names = os.listdir(parent)
    except OSError:
        return []
    now = time.time() if now is None else now
    removed = []
    for name in names:
        match = OWNED_NAME.fullmatch(name)
        if match is None or _alive(int(match.group(1))):
            continue
        path = os.path.join(parent, name)
        try:
            if now - os.stat(path).st_mtime < ABANDONED_AFTER_S:
                continue
            os.rmdir(path)
        except OSError:
            continue
        removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's
    return True


def _has_controller(path: str, name: str) -> bool:
    return name in (_read(os.path.join(path, "cgroup.controllers")) or "").split()


def _int(text: str | None) -> int | None:
    try:
        return int((text or "").strip())
    except ValueError:
        return None


def _pids(path: str) -> list[int]:
    return [int(p) for p in (_read(path) or "").split() if p.isdigit()]


def _rmdir(path: str, attempts: int = 20) -> bool:
    # A member that just died may keep the cgroup busy for a moment.
    for _ in range(attempts):
        try:
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                return False
            time.sleep(0.05)
    return False
