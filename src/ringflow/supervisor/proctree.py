"""The execution's process tree: subreaper, discovery through /proc, kill everything.

A program may leave its process group (`setsid`) and its parent (double fork). As a
child subreaper the supervisor inherits such escapees instead of PID 1; each child is
started with a token in its environment, so an inherited process is claimed only when it
was seen in our tree before or carries our token (another supervision running in the
same process has its own token). Where a cgroup is owned, its member list is exact and
is merged in as well.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37
TOKEN_ENV = "RINGFLOW_SUPERVISION_TOKEN"
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def set_child_subreaper() -> tuple[bool, str]:
    """Make this process inherit orphaned descendants; returns (ok, reason)."""
    try:
        # The process's own symbols, libc's among them: find_library("c") would run
        # `ldconfig -p` in a new process at every execution.
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            err = ctypes.get_errno()
            return False, f"prctl(PR_SET_CHILD_SUBREAPER) failed: {os.strerror(err)}"
        flag = ctypes.c_int(0)
        libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0)
        return bool(flag.value), "" if flag.value else "prctl accepted but flag not set"
    except (OSError, AttributeError) as exc:
        return False, f"prctl unavailable: {exc}"


@dataclass(frozen=True)
class ProcStat:
    """Fields of /proc/<pid>/stat that the supervisor uses (times in seconds)."""

    pid: int
    name: str
    state: str
    ppid: int
    utime: float
    stime: float
    cutime: float
    cstime: float
    num_threads: int
    starttime: int
    rss_bytes: int
    session: int = 0  # its session's id (that of the process that called setsid)

    @property
    def cpu_s(self) -> float:
        return self.utime + self.stime

    @property
    def cpu_with_children_s(self) -> float:
        return self.utime + self.stime + self.cutime + self.cstime


def parse_stat(pid: int, text: str) -> ProcStat:
    """Parse one stat line; the name sits in parentheses and may itself hold spaces."""
    lparen, rparen = text.index("("), text.rindex(")")
    rest = text[rparen + 2 :].split()
    tick = float(CLOCK_TICKS)
    return ProcStat(
        pid=pid,
        name=text[lparen + 1 : rparen],
        state=rest[0],
        ppid=int(rest[1]),
        utime=int(rest[11]) / tick,
        stime=int(rest[12]) / tick,
        cutime=int(rest[13]) / tick,
        cstime=int(rest[14]) / tick,
        num_threads=int(rest[17]),
        starttime=int(rest[19]),
        rss_bytes=int(rest[21]) * PAGE_SIZE,
        session=int(rest[3]),
    )


def read_text(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return handle.read().decode(errors="replace")
    except OSError:
        return None


def read_stat(pid: int) -> ProcStat | None:
    """The process's stat, or None when it is gone (or unreadable)."""
    text = read_text(f"/proc/{pid}/stat")
    if text is None:
        return None
    try:
        return parse_stat(pid, text)
    except (ValueError, IndexError):
        return None


def thread_ids(pid: int) -> list[int]:
    try:
        return [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def children_files_available() -> bool:
    """Whether the kernel offers /proc/<pid>/task/<tid>/children (CONFIG_PROC_CHILDREN)."""
    me = os.getpid()
    return os.path.exists(f"/proc/{me}/task/{me}/children")


def children_of(pid: int, tids: Iterable[int] | None = None) -> list[int]:
    """Direct children of every thread of `pid` through the per-thread children files."""
    found: list[int] = []
    for tid in tids if tids is not None else thread_ids(pid):
        text = read_text(f"/proc/{pid}/task/{tid}/children")
        if text:
            found.extend(int(c) for c in text.split())
    return found


def children_by_scan() -> dict[int, list[int]]:
    """ppid -> children for the whole machine: the fallback without children files."""
    table: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = read_stat(int(entry))
            if stat is not None:
                table.setdefault(stat.ppid, []).append(stat.pid)
    return table


def environ_has(pid: int, needle: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return needle in handle.read().split(b"\0")
    except OSError:
        return False


def read_wchan(pid: int, tid: int) -> str:
    text = read_text(f"/proc/{pid}/task/{tid}/wchan")
    return text.strip() if text and text.strip() not in ("", "0") else ""


class ProcessTree:
    """Finds the live members of one execution's tree and kills or reaps them."""

    def __init__(self, token: str, cgroup_members: Callable[[], list[int]] | None = None) -> None:
        self.token = token
        self.root_pid: int | None = None
        self.root_starttime: int | None = None
        self.cgroup_members = cgroup_members
        self.use_children_files = children_files_available()
        self.known: dict[int, int] = {}  # pid -> starttime of every process ever claimed
        self.reaped_cpu_s = 0.0  # rusage of processes this supervisor reaped itself
        self._needle = f"{TOKEN_ENV}={token}".encode()

    def set_root(self, pid: int) -> None:
        self.root_pid = pid
        stat = read_stat(pid)
        self.root_starttime = stat.starttime if stat is not None else None
        if stat is not None:
            self.known[pid] = stat.starttime

    def _claim_inherited(self, pid: int, stat: ProcStat) -> bool:
        if self.known.get(pid) == stat.starttime:
            return True
        return environ_has(pid, self._needle)

    def discover(self) -> dict[int, ProcStat]:
        """Live members (zombies included): descendants of the root, every process
        re-parented to us that belongs to this execution, and the cgroup's members."""
        me = os.getpid()
        table = None if self.use_children_files else children_by_scan()

        def kids(pid: int) -> list[int]:
            if table is not None:
                return table.get(pid, [])
            return children_of(pid)

        seeds: list[int] = []
        if self.root_pid is not None:
            seeds.append(self.root_pid)
        seeds.extend(p for p in kids(me) if p != self.root_pid)
        in_cgroup: set[int] = set()
        if self.cgroup_members is not None:
            in_cgroup = set(self.cgroup_members())
            seeds.extend(in_cgroup)
        members: dict[int, ProcStat] = {}
        queue = list(dict.fromkeys(seeds))
        while queue:
            pid = queue.pop()
            if pid in members or pid == me:
                continue
            stat = read_stat(pid)
            if stat is None:
                continue
            inherited = pid != self.root_pid and stat.ppid == me and pid not in in_cgroup
            if inherited and not self._claim_inherited(pid, stat):
                continue  # a child of this process that belongs to someone else
            if pid == self.root_pid and stat.starttime != self.root_starttime:
                continue  # the root's PID was reused
            members[pid] = stat
            queue.extend(kids(pid))
        # Remember exactly the current members: a process re-parented to us later was a
        # member at the previous reading, and the table stays as small as the tree.
        self.known = {pid: stat.starttime for pid, stat in members.items()}
        return members

    def reap_inherited(self, members: dict[int, ProcStat]) -> list[int]:
        """Reap zombies re-parented to us (never the root: supervise waits for it)."""
        me = os.getpid()
        reaped: list[int] = []
        for pid, stat in members.items():
            if pid == self.root_pid or stat.ppid != me or stat.state != "Z":
                continue
            try:
                got, _status, usage = os.wait4(pid, os.WNOHANG)
            except ChildProcessError:
                continue
            if got == pid:
                self.reaped_cpu_s += usage.ru_utime + usage.ru_stime
                reaped.append(pid)
        return reaped

    def signal_all(
        self, members: dict[int, ProcStat], sig: int, spare: frozenset[str] = frozenset()
    ) -> int:
        """Send `sig` to every live member whose identity still matches; returns the count.

        Members running one of the `spare` executables are skipped.
        """
        sent = 0
        for pid, stat in members.items():
            if stat.state == "Z" or (spare and executable(pid) in spare):
                continue
            current = read_stat(pid)
            if current is None or current.starttime != stat.starttime:
                continue
            try:
                os.kill(pid, sig)
                sent += 1
            except (ProcessLookupError, PermissionError):
                pass
        return sent


def executable(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


def alive(members: dict[int, ProcStat]) -> dict[int, ProcStat]:
    """Members that are not zombies."""
    return {pid: s for pid, s in members.items() if s.state != "Z"}


def wait_for_an_end(pids: Iterable[int], until: float, wake_fd: int | None = None) -> None:
    """Sleep until one of `pids` ends, `wake_fd` is readable or time.monotonic() reaches
    `until`. What a program leaves for a moment is mostly bubblewrap's init tearing its
    namespaces down, a few milliseconds after the program's end; each is waited for as it
    ends (a pidfd each), not on a fixed tick. Where a pidfd cannot be had (the process is
    gone already, an old kernel), it sleeps 2 ms at most and the caller looks again."""
    poller = select.poll()
    if wake_fd is not None:
        poller.register(wake_fd, select.POLLIN)
    pidfds: list[int] = []
    every_one = True
    try:
        for pid in pids:
            try:
                pidfds.append(os.pidfd_open(pid))
            except (AttributeError, OSError):
                every_one = False
                break
            poller.register(pidfds[-1], select.POLLIN)
        left = max(until - time.monotonic(), 0.0)
        poller.poll((left if every_one else min(left, 0.002)) * 1000)
    finally:
        for fd in pidfds:
            os.close(fd)


def describe(pid: int, stat: ProcStat | None = None) -> dict:
    """{pid, name, state, wchan} of a process left behind, wchan per thread."""
    stat = stat or read_stat(pid)
    wchans = sorted({w for tid in thread_ids(pid) if (w := read_wchan(pid, tid))})
    return {
        "pid": pid,
        "name": stat.name if stat else "?",
        "state": stat.state if stat else "?",
        "wchan": ",".join(wchans),
    }


SIGNAL_NAMES = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "SIGINT", signal.SIGHUP: "SIGHUP"}
