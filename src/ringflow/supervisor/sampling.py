"""One reading of the execution's whole tree, plus the files that show its output.

Raw /proc reads are used rather than psutil objects: a tree of 100 processes must be read
in well under 20 ms, and per-thread `wchan` and state are needed anyway (a program whose
main thread sleeps in a futex while its workers compute is busy).
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from stat import S_ISREG

from ..core.safetree import usage
from .cgroup import OwnedCgroup
from .gpu import GpuMonitor, GpuWindow
from .proctree import ProcessTree, ProcStat, read_text, thread_ids

MAX_THREADS_READ = 256  # per process: beyond this the per-thread detail is cut
MAX_WALK_ENTRIES = 20_000  # per watched folder
PROGRESS_MAX_BYTES = 64 * 1024
PROGRESS_MAX_DEPTH = 32  # what the health log keeps of it


@dataclass
class Sample:
    """The tree at one instant; cumulative figures include processes that have exited."""

    t: float  # monotonic
    wall: float  # epoch
    ok: bool
    error: str = ""
    pids: list[int] = field(default_factory=list)
    n_procs: int = 0
    n_threads: int = 0
    rss_bytes: int = 0
    cpu_s: float = 0.0
    io_bytes: int = 0  # characters read + written (page cache, pipes and sockets included)
    read_bytes: int = 0  # storage level
    write_bytes: int = 0
    thread_states: dict[str, int] = field(default_factory=dict)
    wchans: dict[str, int] = field(default_factory=dict)
    processes: list[dict] = field(default_factory=list)
    memory_usage_bytes: int | None = None
    memory_limit_bytes: int | None = None
    memory_headroom_bytes: int | None = None
    oom_kills: int | None = None
    output_bytes: int | None = None
    writable_mtime: float | None = None
    progress: dict | None = None
    gpu: GpuWindow | None = None
    probes: dict = field(default_factory=dict)

    @property
    def d_state_threads(self) -> int:
        return self.thread_states.get("D", 0)

    def summary(self) -> dict:
        """The sample as JSON-ready data (per-process detail included)."""
        data = {k: v for k, v in self.__dict__.items() if k != "gpu"}
        data["cpu_s"] = round(self.cpu_s, 3)
        data["gpu"] = self.gpu.to_dict() if self.gpu else None
        return data


def read_io(pid: int) -> dict[str, int] | None:
    text = read_text(f"/proc/{pid}/io")
    if not text:
        return None
    values = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if value.strip().isdigit():
            values[key] = int(value)
    return values


def thread_detail(pid: int, process: ProcStat) -> tuple[Counter, Counter, bool]:
    """Per-thread states and wchans of one process; wchan readability."""
    states: Counter = Counter()
    wchans: Counter = Counter()
    wchan_ok = False
    # A single-threaded process: its own stat already holds the one thread's state.
    tids = [pid] if process.num_threads == 1 else thread_ids(pid)[:MAX_THREADS_READ]
    for tid in tids:
        if process.num_threads == 1:
            states[process.state] += 1
        elif stat := read_text(f"/proc/{pid}/task/{tid}/stat"):
            rparen = stat.rfind(")")
            states[stat[rparen + 2 : rparen + 3]] += 1
        wchan_text = read_text(f"/proc/{pid}/task/{tid}/wchan")
        if wchan_text is not None:
            wchan_ok = True
            wchan = wchan_text.strip()
            wchans[wchan if wchan not in ("", "0") else "running"] += 1
    return states, wchans, wchan_ok


def folder_bytes(folder: Path) -> tuple[int, float]:
    """(apparent bytes of regular files, latest mtime of the folder and anything in it),
    read by descriptor (any depth or names) up to MAX_WALK_ENTRIES entries: evidence of
    activity only; the limits are counted without a cap (output_limits.py)."""
    found = usage(folder, max_entries=MAX_WALK_ENTRIES)
    return found.bytes, found.latest_mtime


def read_progress(path: Path) -> dict | None:
    """progress.json as the program left it: whatever it holds (deep nesting, bytes that
    are not text, a FIFO) gives a `content_error`, never a failed sample."""
    try:
        st = path.lstat()
    except OSError:
        return None
    record: dict = {"mtime": st.st_mtime, "size": st.st_size, "content": None}
    if not S_ISREG(st.st_mode):
        record["content_error"] = "not a regular file"
    elif st.st_size > PROGRESS_MAX_BYTES:
        record["content_error"] = f"larger than {PROGRESS_MAX_BYTES} bytes"
    else:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            with os.fdopen(fd, "rb") as handle:
                content = json.loads(handle.read(PROGRESS_MAX_BYTES + 1))
        except (OSError, ValueError, RecursionError) as exc:
            record["content_error"] = type(exc).__name__
            return record
        if _depth(content) > PROGRESS_MAX_DEPTH:
            record["content_error"] = f"nested deeper than {PROGRESS_MAX_DEPTH} levels"
        else:
            record["content"] = content
    return record


def _depth(value: object) -> int:
    """Nesting depth of parsed JSON, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if isinstance(item, dict):
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, level + 1) for v in item)
    return deepest


class TreeSampler:
    """Keeps what is needed to turn per-process counters into tree-wide cumulative ones."""

    def __init__(
        self,
        tree: ProcessTree,
        cgroup: OwnedCgroup | None,
        gpu: GpuMonitor | None,
        watch_output: Sequence[os.PathLike | str] = (),
        watch_writable: Sequence[os.PathLike | str] = (),
        progress_file: os.PathLike | str | None = None,
    ) -> None:
        self.tree = tree
        self.cgroup = cgroup
        self.gpu = gpu
        self.watch_output = [Path(p) for p in watch_output]
        self.watch_writable = [Path(p) for p in watch_writable]
        self.progress_file = Path(progress_file) if progress_file else None
        self._io_seen: dict[tuple[int, int], tuple[int, int, int]] = {}
        self._io_total = [0, 0, 0]
        self._cpu_total = 0.0
        self.last_members: dict[int, ProcStat] = {}
        # Per-process probes stay "available" once seen: an empty tree proves nothing.
        self._io_ok = False
        self._wchan_ok = False

    def cpu_total(self, members: dict[int, ProcStat]) -> float:
        """Cumulative CPU of the tree: cgroup usage when owned, else /proc with the rusage
        of reaped processes (each live process's own time plus its reaped children's)."""
        from_cgroup = self.cgroup.cpu_usage_s() if self.cgroup else None
        if from_cgroup is not None:
            value = from_cgroup
        else:
            live = sum(s.cpu_with_children_s for s in members.values())
            value = live + self.tree.reaped_cpu_s
        self._cpu_total = max(self._cpu_total, value)
        return self._cpu_total

    def _account_io(self, key: tuple[int, int], io: dict[str, int]) -> None:
        current = (
            io.get("rchar", 0) + io.get("wchar", 0),
            io.get("read_bytes", 0),
            io.get("write_bytes", 0),
        )
        previous = self._io_seen.get(key, (0, 0, 0))
        for i in range(3):
            self._io_total[i] += max(0, current[i] - previous[i])
        self._io_seen[key] = current

    def sample(self) -> Sample:
        """Read the tree now; a failure is returned as a sample with ok=False."""
        t, wall = time.monotonic(), time.time()
        try:
            return self._sample(t, wall)
        except Exception as exc:  # the loop must go on; the failure is recorded
            return Sample(t=t, wall=wall, ok=False, error=f"{type(exc).__name__}: {exc}")

    def _sample(self, t: float, wall: float) -> Sample:
        members = self.tree.discover()
        self.tree.reap_inherited(members)
        self.last_members = members
        states: Counter = Counter()
        wchans: Counter = Counter()
        processes = []
        io_ok = wchan_ok = False
        live_keys = set()
        for pid, stat in members.items():
            key = (pid, stat.starttime)
            live_keys.add(key)
            io = read_io(pid) if stat.state != "Z" else None
            if io is not None:
                io_ok = True
                self._account_io(key, io)
            p_states, p_wchans, p_wchan_ok = thread_detail(pid, stat)
            wchan_ok = wchan_ok or p_wchan_ok
            states.update(p_states or {stat.state: 1})
            wchans.update(p_wchans)
            processes.append(
                {
                    "pid": pid,
                    "ppid": stat.ppid,
                    "name": stat.name,
                    "state": stat.state,
                    "threads": stat.num_threads,
                    "rss_bytes": stat.rss_bytes,
                    "cpu_s": round(stat.cpu_s, 2),
                    "wchan": dict(p_wchans),
                }
            )
        # Forget exited processes so the table stays small; their bytes stay counted.
        for key in list(self._io_seen):
            if key not in live_keys:
                del self._io_seen[key]
        sample = Sample(
            t=t,
            wall=wall,
            ok=True,
            pids=sorted(members),
            n_procs=len(members),
            n_threads=sum(s.num_threads for s in members.values()),
            rss_bytes=sum(s.rss_bytes for s in members.values()),
            cpu_s=self.cpu_total(members),
            io_bytes=self._io_total[0],
            read_bytes=self._io_total[1],
            write_bytes=self._io_total[2],
            thread_states=dict(states),
            wchans=dict(wchans.most_common(8)),
            processes=processes,
        )
        if self.cgroup is not None:
            usage, limit = self.cgroup.memory_usage()
            sample.memory_usage_bytes, sample.memory_limit_bytes = usage, limit
            if usage is not None and limit is not None:
                sample.memory_headroom_bytes = limit - usage
            sample.oom_kills = self.cgroup.oom_kills()
        if self.watch_output:
            sample.output_bytes = sum(folder_bytes(p)[0] for p in self.watch_output)
        if self.watch_writable:
            sample.writable_mtime = max(folder_bytes(p)[1] for p in self.watch_writable)
        if self.progress_file is not None:
            sample.progress = read_progress(self.progress_file)
        if self.gpu is not None:
            self.gpu.poll(members, now=t)
            sample.gpu = self.gpu.take(now=t)
        self._io_ok = self._io_ok or io_ok
        self._wchan_ok = self._wchan_ok or wchan_ok
        sample.probes = {
            "proc_tree": True,
            "children_files": self.tree.use_children_files,
            "io": self._io_ok,
            "wchan": self._wchan_ok,
            "cgroup_cpu": bool(self.cgroup and self.cgroup.v2_path),
            "cgroup_memory": sample.memory_usage_bytes is not None,
            "cgroup_kill": bool(self.cgroup and self.cgroup.can_kill),
            "gpu": bool(self.gpu and self.gpu.available),
            "gpu_reason": self.gpu.reason if self.gpu else "not probed",
        }
        return sample
