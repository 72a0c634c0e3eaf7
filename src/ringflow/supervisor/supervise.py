"""Run one program under supervision: sample its health, stop it at the (moving)
deadline or when hung, and leave no process of its tree behind
(docs/operations.md#health-supervision).

The loop wakes at least every 0.25 s (a moved cutoff acts promptly) and at once when the
program exits (a pidfd) or the supervisor gets a signal (a pipe). Every stop is the same
sequence: SIGTERM to the whole tree, a grace for a last checkpoint, then SIGKILL sweeps
(cgroup.kill where a cgroup is owned) until nothing is left.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..core import diskspace, statuses
from ..core.errors import InputError
from . import gate, held_signals
from .activity import ActivityTracker, judge_window
from .cgroup import OwnedCgroup
from .gpu import GpuMonitor
from .health_log import HealthLog
from .logsink import LogSink
from .memory import private_tmpfs_bytes, tree_memory_bytes
from .oom import KILLED_CODES, MemoryWatch, allocation_failed
from .output_limits import file_too_large, over_limits
from .proctree import (
    SIGNAL_NAMES,
    TOKEN_ENV,
    ProcessTree,
    alive,
    describe,
    read_stat,
    set_child_subreaper,
    wait_for_an_end,
)
from .sampling import Sample, TreeSampler
from .settings import HealthSettings, ResourceLimits

TICK_S = 0.25  # deadline, signal and orphan checks happen at least this often
LIMIT_CHECK_S = 1.0  # output size, process count and (without a cgroup) memory
NEAR_LIMIT_CHECK_S = 0.1  # memory without a cgroup, once the tree holds half its limit
NEAR_LIMIT_FRACTION = 0.5
GPU_POLL_S = 1.0  # NVML per-process samples are integrated at this cadence
KILL_SWEEPS = 20
LEFTOVER_SETTLE_S = 0.5
# Processes of the sandbox outside the program's namespace (bubblewrap's, the start gate's),
# counted in the tree but not under the program's RLIMIT_NPROC.
SANDBOX_OWN_TASKS = 8
OOM_COUNT_SETTLE_S = 0.3  # a kill's count may land just after its victim is reaped
HANDLED_SIGNALS = held_signals.HELD


@dataclass
class Outcome:
    """How one supervised execution ended (the core of result.json,
    docs/ring-folder.md#executions)."""

    status: str
    budget_cut: bool
    exit_code: int | None
    signal: int | None
    wall_s: float
    cpu_s: float
    reap_left: list[dict]
    reason: str
    events: list[dict]
    health_jsonl: str
    health_latest: str
    limits: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return asdict(self)

    @property
    def start_failed(self) -> bool:
        """The program never started (the machinery's failure, never the program's): its
        event may follow others, such as the memory limits it would have had."""
        return any(event.get("event") == "start_failed" for event in self.events)


def wait_for(
    predicate: Callable[[], bool],
    *,
    deadline: Callable[[], float | None],
    poll_s: float = 0.2,
) -> bool:
    """Wait until `predicate()` holds (True) or the moving deadline passes (False).

    The deadline is re-read at every poll, so a cutoff moved earlier ends the wait."""
    while True:
        cutoff = deadline()
        now = time.time()
        if cutoff is not None and cutoff <= now:
            return False
        if predicate():
            return True
        pause = poll_s if cutoff is None else min(poll_s, max(cutoff - now, 0.0))
        time.sleep(max(pause, 0.001))


class _Ancestors:
    """Parent and grandparent at start; either vanishing means we were orphaned."""

    def __init__(self) -> None:
        self.watched: list[tuple[str, int, int]] = []
        parent = os.getppid()
        stat = read_stat(parent) if parent > 1 else None
        if stat is not None:
            self.watched.append(("parent", parent, stat.starttime))
            grand = read_stat(stat.ppid) if stat.ppid > 1 else None
            if grand is not None:
                self.watched.append(("grandparent", grand.pid, grand.starttime))
        self.parent = parent
        self._next_full = 0.0

    def gone(self, now: float) -> str | None:
        """Which ancestor is gone, or None; the parent is checked every call (cheap)."""
        if self.parent > 1 and os.getppid() != self.parent:
            return f"parent {self.parent}"
        if now < self._next_full:
            return None
        self._next_full = now + 1.0
        for role, pid, starttime in self.watched:
            stat = read_stat(pid)
            if stat is None or stat.starttime != starttime or stat.state == "Z":
                return f"{role} {pid}"
        return None


class _Supervision:
    def __init__(
        self,
        argv,
        cwd,
        env,
        stdout_path,
        stderr_path,
        health_dir,
        settings,
        limits,
        deadline,
        watch_output,
        watch_writable,
        progress_file,
        gpu_ids,
        watch_ancestors,
        spawn_setup,
        wrappers=(),
        pass_fds=(),
        mark_environment=True,
        gpus_unreachable=None,
    ) -> None:
        self.argv = [os.fspath(a) for a in argv]
        self.cwd, self.env = cwd, dict(env)
        self.stdout_path, self.stderr_path = Path(stdout_path), Path(stderr_path)
        self.health_dir = Path(health_dir)
        self.settings, self.limits = settings, limits
        self.deadline_fn = deadline
        self.watch_output, self.watch_writable = watch_output, watch_writable
        self.progress_file, self.gpu_ids = progress_file, gpu_ids
        self.watch_ancestors, self.spawn_setup = watch_ancestors, spawn_setup
        self.wrappers = frozenset(os.path.realpath(w) for w in wrappers)
        self.pass_fds = tuple(pass_fds)
        self.mark_environment = mark_environment
        self.gpus_unreachable = gpus_unreachable
        self.sinks: list[LogSink] = []
        self.events: list[dict] = []
        self.got_signal: int | None = None
        self.signal_count = 0
        self._deadline_error_logged = False
        self.root_status: int | None = None  # raw wait status once reaped
        self.proc: subprocess.Popen | None = None
        self.pidfd: int | None = None
        self.poller: select.poll | None = None
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        os.set_blocking(self.wake_r, False)

    # -- small helpers ---------------------------------------------------------------
    def event(self, name: str, **fields) -> dict:
        record = {"event": name, "wall": round(time.time(), 3), **fields}
        self.events.append(record)
        if hasattr(self, "health"):
            self.health.event(record)
        return record

    def cutoff(self) -> float | None:
        try:
            value = self.deadline_fn()
        except Exception as exc:  # a broken deadline source must not kill supervision
            if not self._deadline_error_logged:
                self._deadline_error_logged = True
                self.event("deadline_unreadable", error=f"{type(exc).__name__}: {exc}")
            return None
        return None if value is None else float(value)

    def _on_signal(self, signum, _frame) -> None:
        self.got_signal = signum
        self.signal_count += 1
        with contextlib.suppress(OSError):
            os.write(self.wake_w, b"s")

    def root_exited(self) -> bool:
        """Reap the root if it has exited (its rusage goes into the tree's CPU)."""
        if self.root_status is not None:
            return True
        assert self.proc is not None
        try:
            pid, status, usage = os.wait4(self.proc.pid, os.WNOHANG)
        except ChildProcessError:
            self.root_status = 0  # reaped elsewhere: status unknown
            self.event("root_reaped_elsewhere", pid=self.proc.pid)
            self.proc.returncode = 0
            return True
        if pid == 0:
            return False
        self.root_status = status
        self.tree.reaped_cpu_s += usage.ru_utime + usage.ru_stime
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        return True

    def wait(self, timeout: float) -> bool:
        """Sleep up to `timeout`, waking early when the root exits or a signal arrives.

        Returns whether the root may have exited (then `root_exited` tells for sure)."""
        timeout = max(timeout, 0.0)
        if self.pidfd is None or self.root_status is not None:
            end = time.monotonic() + timeout
            while time.monotonic() < end and not self.got_signal:
                if self.root_status is None and self.root_exited():
                    return True
                time.sleep(min(0.05, max(end - time.monotonic(), 0)))
            return self.root_status is not None
        if self.poller is None:
            self.poller = select.poll()
            self.poller.register(self.pidfd, select.POLLIN)
            self.poller.register(self.wake_r, select.POLLIN)
        ready = dict(self.poller.poll(timeout * 1000))
        if self.wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(self.wake_r, 64)
        return self.pidfd in ready

    # -- the run ---------------------------------------------------------------------
    def run(self) -> Outcome:
        self.start_t, self.start_wall = time.monotonic(), time.time()
        self.health = HealthLog(
            self.health_dir,
            self.settings.interval_s,
            self.start_t,
            self.start_wall,
            {"argv": self.argv, "started": round(self.start_wall, 3)},
        )
        cutoff = self.cutoff()
        if cutoff is not None and cutoff <= self.start_wall:
            return self._not_started(cutoff)
        self.subreaper = set_child_subreaper()
        if not self.subreaper[0]:
            self.event("subreaper_unavailable", reason=self.subreaper[1])
        token = uuid.uuid4().hex
        memory = None
        if self.limits.memory_gb is not None:
            memory = int(self.limits.memory_gb * 1024**3)
        self.cgroup = OwnedCgroup.create(
            f"ringflow-{os.getpid()}-{token[:12]}", memory, self.limits.max_processes
        )
        self.memory_watch = MemoryWatch.start(self.cgroup)
        # Without a memory cgroup each process is bounded by RLIMIT_DATA, the tree by the
        # supervisor; never on GPU runs, whose drivers map far more than they use.
        gpu_run = bool(self.gpu_ids)
        self.data_limit = None if self.cgroup.memory.get("enforced") or gpu_run else memory
        self.memory_near = False
        self.near_limit_checks = 0
        self.tasks_refused = 0  # forks and threads pids.max refused (pids.events "max")
        self.own_sessions_seen = False
        try:
            return self._run_started(token)
        finally:
            for problem in self.cgroup.remove():
                self.event("cgroup_left", detail=problem)
            if self.pidfd is not None:
                os.close(self.pidfd)
            os.close(self.wake_r)
            os.close(self.wake_w)

    def _not_started(self, cutoff: float) -> Outcome:
        reason = f"deadline passed before start (cutoff {cutoff:.3f})"
        self.event("deadline", before_start=True, cutoff=cutoff)
        self.health.write_latest("not_started", None, None, 0.0, {"reason": reason})
        self.health.close(time.monotonic(), 0.0, {"status": statuses.INTERRUPTED})
        return self._outcome(statuses.INTERRUPTED, True, reason, 0.0, 0.0, [], limits={})

    def _limits_record(self) -> dict:
        limits = self.limits
        if self.settings.enforce:
            applies = "only after the tree could not be read for failed_after_s (enforce mode)"
        else:
            applies = "always (observe mode)"
        return {
            "memory": {"requested_gb": limits.memory_gb, **self._memory_record()},
            "time_limit_min": {"value": limits.time_limit_min, "applies": applies},
            "threads": {
                "value": limits.threads,
                "enforced": False,
                "how": "thread-count environment variables, set by the caller",
            },
            "output_gb": {
                "value": limits.output_gb,
                "how": "apparent sizes of the output and writable folders, every second and "
                "after the run; RLIMIT_FSIZE per file",
            },
            "output_files": {
                "value": limits.output_files,
                "how": "files and folders counted every second and after the run",
            },
            "log_mb": {"value": limits.log_mb, "how": "logs copied up to the limit, then a marker"},
            "max_processes": {
                "value": limits.max_processes,
                **self.cgroup.pids,
                **({"refused": self.tasks_refused} if self.cgroup.pids.get("enforced") else {}),
                "counted": "RLIMIT_NPROC in a user namespace; where no pids cgroup holds it, the "
                f"tree counted every second and ended past the limit plus {SANDBOX_OWN_TASKS}",
            },
            "cgroup": self.cgroup.describe(),
            "subreaper": {"ok": self.subreaper[0], "reason": self.subreaper[1]},
        }

    def _memory_record(self) -> dict:
        record = dict(self.cgroup.memory)
        if not record.get("enforced") and self.limits.memory_gb is not None:
            # No memory cgroup (an ordinary user has none): the supervisor enforces it, as
            # well as it can from outside (docs/limits.md#memory).
            record.update(
                enforced=True,
                best_effort=True,
                how="supervisor: summed RSS of the tree and the sandbox's /tmp and /dev/shm, "
                f"every {LIMIT_CHECK_S:g} s ({NEAR_LIMIT_CHECK_S:g} s past half the limit)",
                rlimit_data_bytes=self.data_limit,
                near_limit_checks=self.near_limit_checks,
            )
        return record

    def _install_signals(self) -> dict:
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous = {}
        for sig in HANDLED_SIGNALS:
            previous[sig] = signal.signal(sig, self._on_signal)
        if (held := held_signals.pending()) is not None:
            self.got_signal = held  # came while the step held it: the run stops at once
        return previous

    def _run_started(self, token: str) -> Outcome:
        owned = self.cgroup.v2_path or self.cgroup.v1_memory_path or self.cgroup.v1_pids_path
        self.tree = ProcessTree(token, self.cgroup.members if owned else None)
        if not self.cgroup.memory.get("enforced"):
            self.event("limits", memory=self.cgroup.memory)
        self.gpu = GpuMonitor(self.gpu_ids, self.env, off=self.gpus_unreachable)
        self.sampler = TreeSampler(
            self.tree,
            self.cgroup,
            self.gpu,
            self.watch_output,
            self.watch_writable,
            self.progress_file,
        )
        self.tracker = ActivityTracker(self.settings, self.start_t)
        ancestors = _Ancestors() if self.watch_ancestors else None
        previous_handlers = self._install_signals()
        try:
            started = self._start(token)
            if started is not None:
                return started
            return self._supervise(ancestors)
        finally:
            for sig, handler in previous_handlers.items():
                # None: a handler installed outside Python, which cannot be put back.
                signal.signal(sig, handler if handler is not None else signal.SIG_DFL)

    def _start(self, token: str) -> Outcome | None:
        self.stdout_path.parent.mkdir(parents=True, exist_ok=True)
        self.stderr_path.parent.mkdir(parents=True, exist_ok=True)
        log_limit = None
        if self.limits.log_mb is not None:
            log_limit = int(self.limits.log_mb * 1024 * 1024)
        self.sinks = [LogSink(self.stdout_path, log_limit), LogSink(self.stderr_path, log_limit)]
        # Inside a sandbox the tree is found through its namespace; the token would only
        # tell the program that it is supervised.
        env = {**self.env, TOKEN_ENV: token} if self.mark_environment else dict(self.env)
        procs_files = self.cgroup.procs_files()
        gated = bool(procs_files) or self.data_limit is not None
        gate_r = gate_w = None
        try:
            if gated:
                gate.check_executable(self.argv[0], env, self.cwd)
                gate_r, gate_w = os.pipe()
            if self.spawn_setup is not None:
                self.spawn_setup()
            # No code of ours runs in the child (docs/architecture.md#how-a-program-starts).
            self.proc = subprocess.Popen(
                gate.gated_argv(self.argv) if gated else self.argv,
                cwd=self.cwd,
                env=env,
                stdin=gate_r if gated else subprocess.DEVNULL,
                stdout=self.sinks[0].write_fd,
                stderr=self.sinks[1].write_fd,
                start_new_session=True,
                close_fds=True,
                pass_fds=self.pass_fds,
            )
            if gate_r is not None:
                os.close(gate_r)
                gate_r = None
                gate.place(self.proc.pid, procs_files, self.data_limit)
                gate.release(gate_w)
                gate_w = None
        except (OSError, subprocess.SubprocessError) as exc:
            for fd in (gate_r, gate_w):
                if fd is not None:
                    os.close(fd)
            if self.proc is not None:  # told nothing, its gate ends it unstarted
                self.proc.wait()
                self.proc = None
            for sink in self.sinks:
                sink.close()
            reason = f"could not start {self.argv[0]!r}: {exc}"
            self.event("start_failed", error=str(exc))
            wall = time.monotonic() - self.start_t
            self.health.close(time.monotonic(), 0.0, {"status": statuses.CRASH, "reason": reason})
            return self._outcome(
                statuses.CRASH, False, reason, wall, 0.0, [], limits=self._limits_record()
            )
        for sink in self.sinks:
            sink.start()
        self.tree.set_root(self.proc.pid)
        self.cgroup.verify_member(self.proc.pid)
        try:
            self.pidfd = os.pidfd_open(self.proc.pid)
        except (OSError, AttributeError):
            self.pidfd = None
        return None

    def _supervise(self, ancestors: _Ancestors | None) -> Outcome:
        settings = self.settings
        collect_s = settings.collect_s
        tick = min(TICK_S, collect_s)
        prev = self.sampler.sample()
        last_good_t = prev.t if prev.ok else self.start_t
        self.health.record(prev, None, 0.0, "running")
        next_sample = time.monotonic() + collect_s
        next_gpu = time.monotonic() + GPU_POLL_S
        limit_s = None
        if self.limits.time_limit_min is not None:
            limit_s = self.limits.time_limit_min * 60
        oom_seen = prev.oom_kills or 0
        stop: tuple[str, bool, str] | None = None
        sample_failures = 0
        next_limits = time.monotonic() + LIMIT_CHECK_S
        while stop is None:
            now = time.monotonic()
            pause = min(tick, max(next_sample - now, 0.0), max(next_limits - now, 0.0))
            if self.wait(pause) and self.root_exited():
                break
            now, wall = time.monotonic(), time.time()
            if self.got_signal:
                name = SIGNAL_NAMES.get(self.got_signal, str(self.got_signal))
                self.event("signal", signal=name)
                stop = (statuses.INTERRUPTED, False, f"supervisor received {name}")
                break
            cutoff = self.cutoff()
            if cutoff is not None and cutoff <= wall:
                self.event("deadline", cutoff=cutoff)
                stop = (statuses.INTERRUPTED, True, "deadline reached")
                break
            if ancestors is not None and (who := ancestors.gone(now)):
                self.event("orphaned", ancestor=who)
                stop = (statuses.INTERRUPTED, False, f"orphaned: {who} is gone")
                break
            if limit_s is not None and now - self.start_t >= limit_s:
                blind_s = now - last_good_t
                if not settings.enforce or blind_s >= settings.failed_after_s:
                    self.event(
                        "time_limit",
                        limit_min=self.limits.time_limit_min,
                        blind_s=round(blind_s, 1),
                    )
                    stop = (
                        statuses.TIMEOUT,
                        False,
                        f"time limit of {self.limits.time_limit_min} min reached",
                    )
                    break
            if now >= next_limits:
                next_limits = now + (NEAR_LIMIT_CHECK_S if self.memory_near else LIMIT_CHECK_S)
                self._watch_disks()
                if exceeded := self._limit_exceeded():
                    stop = (statuses.CRASH, False, exceeded)
                    break
            if self.gpu.available and now >= next_gpu:
                self.gpu.poll(self.sampler.last_members, now=now)
                next_gpu = now + GPU_POLL_S
            if now < next_sample:
                continue
            sample = self.sampler.sample()
            next_sample = time.monotonic() + collect_s
            window = None
            if sample.ok:
                window = judge_window(prev, sample, settings) if prev.ok else None
                if window is not None:
                    for record in self.tracker.update(window, sample.t, sample.wall):
                        self.events.append(record)
                        self.health.event(record)
                prev, last_good_t = sample, sample.t
                if (sample.oom_kills or 0) > oom_seen:
                    self.event("oom_kill", count=sample.oom_kills - oom_seen)
                    oom_seen = sample.oom_kills or 0
                self._note_own_sessions(self.sampler.last_members)
            else:
                sample_failures += 1
                if sample_failures <= 3 or sample_failures % 100 == 0:
                    self.event("sample_failed", error=sample.error, count=sample_failures)
            self.health.record(sample, window, self.tracker.idle_s(sample.t), "running")
            if self.tracker.hung:
                minutes = settings.hang_min
                stop = (statuses.HUNG, False, f"no activity for {minutes} min (enforce mode)")
        return self._finish(stop, prev)

    # -- stopping --------------------------------------------------------------------
    def _finish(self, stop: tuple[str, bool, str] | None, prev: Sample) -> Outcome:
        if stop is None:
            # The program ended by itself; anything it left behind is swept. A wrapper's
            # own helpers (bubblewrap's init) may still be exiting: give them a moment.
            leftovers = alive(self.tree.discover())
            settle_end = time.monotonic() + LEFTOVER_SETTLE_S
            while leftovers and time.monotonic() < settle_end and not self.got_signal:
                wait_for_an_end(leftovers, settle_end, self.wake_r)
                leftovers = alive(self.tree.discover())
            if leftovers:
                self.event(
                    "leftover_descendants",
                    count=len(leftovers),
                    pids=sorted(leftovers),
                    names=sorted({s.name for s in leftovers.values()}),
                )
                reap_left = self._stop_tree()
            else:
                reap_left = self._sweep_kill()
        else:
            reap_left = self._stop_tree()
        for sink in self.sinks:
            sink.close()
        truncated = [s.path.name for s in self.sinks if s.truncated]
        if truncated:
            self.event("log_truncated", logs=truncated, limit_mb=self.limits.log_mb)
        for sink in self.sinks:
            if sink.write_error is not None:
                self.event("log_write_failed", log=sink.path.name, error=sink.write_error,
                           dropped_bytes=sink.dropped)  # fmt: skip
        self._watch_disks()
        end_t = time.monotonic()
        final = self.sampler.sample()
        window = judge_window(prev, final, self.settings) if prev.ok and final.ok else None
        self.health.record(final, window, self.tracker.idle_s(final.t), "stopped")
        cpu_s = self.sampler.cpu_total({}) if not final.ok else final.cpu_s
        if reap_left:
            self.event("reap_left", processes=reap_left)
        status, budget_cut, reason = stop or self._exit_verdict()
        code = self.proc.returncode if self.proc else None
        killed = stop is None and status == statuses.CRASH and code in KILLED_CODES
        # "Killed by signal 9" alone reads as a crash: say whose memory limit it was.
        memory = self.memory_watch.reason(self.cgroup, self.limits.memory_gb) if killed else None
        if memory:
            reason = f"{memory}; {reason}"
        self._note_oom_kill(prev, memory)
        if self.limits.max_processes is not None:
            self._note_refused_tasks()
        if stop is None and status == statuses.CRASH and self.tasks_refused:
            # The program decided to fail when a fork or a thread was refused: say why.
            reason = f"{self._process_limit_reason()}; {reason}"
        elif stop is None and status == statuses.CRASH and (full := self._output_at_quota()):
            # A write refused at the file-size limit (RLIMIT_FSIZE) ends the program first.
            reason = f"{full}; {reason}"
        elif (stop is None and status == statuses.CRASH and (largest := self._largest_file())
              and file_too_large(self.stderr_path, code)):  # fmt: skip
            # A write that would pass the limit in one go (or a sparse file's far offset)
            # is refused without filling the output: say which limit refused it.
            reason = (f"a write past the largest file a program may write was refused "
                      f"({largest}, RLIMIT_FSIZE); {reason}")  # fmt: skip
        elif (stop is None and status == statuses.CRASH and self.data_limit is not None
              and allocation_failed(self.stderr_path)):  # fmt: skip
            # Only where the program says an allocation failed: on any other crash the
            # limit is beside the point (the limits are in result.json either way).
            reason = (f"{reason} (each process may hold {self.data_limit / 2**30:.3g} GiB of "
                      "data: RLIMIT_DATA from limits.memory_gb, as no memory cgroup could be "
                      "had; an allocation past it fails)")  # fmt: skip
        if stop is None and status == statuses.OK and (over := self._output_over()):
            # Written faster than the once-a-second count could see: still over the limit.
            self.event("limit", limit="output", detail=over)
            status, reason = statuses.CRASH, over
        wall = end_t - self.start_t
        self.health.close(
            end_t,
            self.tracker.idle_s(end_t),
            {"status": status, "budget_cut": budget_cut, "reason": reason},
        )
        return self._outcome(
            status, budget_cut, reason, wall, cpu_s, reap_left, limits=self._limits_record()
        )

    def _note_oom_kill(self, prev: Sample, memory: str | None) -> None:
        """One `oom_kill` event for the kills the sampling loop did not see. Some kernels
        count a limit's hit ("oom") but not the kill in the victim's cgroup, or count the kill
        a moment after the victim is gone: the limit's verdict stands for the count then."""
        seen = prev.oom_kills or 0
        count = (self.cgroup.oom_kills() or 0) - seen
        if count <= 0 and memory:
            settle_end = time.monotonic() + OOM_COUNT_SETTLE_S
            while count <= 0 and time.monotonic() < settle_end:
                time.sleep(0.02)
                count = (self.cgroup.oom_kills() or 0) - seen
        if count > 0:
            self.event("oom_kill", count=count)
        elif memory and not any(e.get("event") == "oom_kill" for e in self.events):
            self.event("oom_kill", count=None, counted="limit reached, kill not counted")

    def _watch_disks(self) -> None:
        """Note once per filesystem when one the run writes to is all but full: a program
        that fails then failed for the machine's sake, even if the room comes back before
        it ends (docs/faults.md#disk-full)."""
        if not hasattr(self, "_full_disks"):
            self._full_disks: set[int] = set()
        for folder in [*self.watch_output, *self.watch_writable, self.health_dir]:
            try:
                device = os.stat(folder).st_dev
            except OSError:
                continue
            free = diskspace.free_bytes(folder)
            if device in self._full_disks or free is None:
                continue
            if free < diskspace.NEARLY_FULL_BYTES:
                self._full_disks.add(device)
                self.event("disk_full", path=str(folder), free_bytes=free)

    def _output_over(self) -> str | None:
        """Why the output and writable folders pass output_files or output_gb, or None."""
        limits = self.limits
        if limits.output_gb is None and limits.output_files is None:
            return None
        max_bytes = None if limits.output_gb is None else int(limits.output_gb * 1024**3)
        return over_limits([*self.watch_output, *self.watch_writable], limits.output_files,
                           max_bytes, limits.output_names)  # fmt: skip

    def _output_at_quota(self) -> str | None:
        quota = self.limits.output_gb
        if quota is None:
            return None
        # At the quota, not only past it: the write that would pass it was refused.
        if over_limits([*self.watch_output, *self.watch_writable], None,
                       int(quota * 1024**3) - 1) is None:  # fmt: skip
            return None
        return f"output limit exceeded: the output reached {self.limits.output_names[0]} = {quota}"

    def _limit_exceeded(self) -> str | None:
        """Which per-execution limit the tree is over (docs/operations.md#health-supervision), or
        None."""
        limits = self.limits
        if over := self._output_over():
            self.event("limit", limit="output", detail=over)
            return over
        members = None
        if limits.max_processes is not None:
            self._note_refused_tasks()
        if limits.max_processes is not None and not self.cgroup.pids.get("enforced"):
            # A backstop where no pids cgroup holds the limit. RLIMIT_NPROC inside the
            # sandbox's namespace refuses a fork there at the limit, as pids.max would, and
            # the program decides what to do about it; the tree counted here also holds
            # the sandbox's own processes outside it, which must not tip a run over.
            members = alive(self.tree.discover())
            tasks = sum(max(stat.num_threads, 1) for stat in members.values())
            if tasks > limits.max_processes + SANDBOX_OWN_TASKS:
                self.event("limit", limit="max_processes", tasks=tasks)
                return (
                    f"process limit reached: {tasks} processes and threads "
                    f"(limits.max_processes = {limits.max_processes})"
                )
        if limits.memory_gb is not None and not self.cgroup.memory.get("enforced"):
            members = members if members is not None else alive(self.tree.discover())
            rss = tree_memory_bytes(members)
            tmpfs = private_tmpfs_bytes(members)
            used, limit = rss + tmpfs, limits.memory_gb * 1024**3
            self.memory_near = used >= NEAR_LIMIT_FRACTION * limit
            self.near_limit_checks += self.memory_near
            if used > limit:
                self.event("limit", limit="memory_gb", rss_bytes=rss, tmpfs_bytes=tmpfs)
                return (
                    f"memory limit (ringflow's {limits.memory_gb:g} GB, limits.memory_gb) "
                    f"exceeded: {used} bytes in the tree ({rss} resident, {tmpfs} in the "
                    f"sandbox's /tmp and /dev/shm; summed RSS)"
                )
        return None

    def _note_own_sessions(self, members: dict) -> None:
        """Record, once, the processes the program put in a session of their own (setsid,
        as a daemon does). The run's stop takes them too, but the same program deployed
        outside ringflow would leave them running after it ends.

        The supervisor starts its child in a session of its own. Under a sandbox, that
        child's own child (bubblewrap's init) opens the session the program runs in; a
        program's orphans are its children too, but keep the session they made."""
        if self.own_sessions_seen or self.proc is None or not members:
            return
        expected = {self.proc.pid}
        if self.wrappers:
            expected |= {stat.session for stat in members.values()
                         if stat.ppid == self.proc.pid and stat.session == stat.pid}  # fmt: skip
        own = sorted((stat for stat in members.values() if stat.session not in expected),
                     key=lambda stat: (stat.starttime, stat.pid))  # fmt: skip
        if own:
            self.own_sessions_seen = True
            self.event("own_session", count=len(own),
                       processes=[{"pid": s.pid, "name": s.name} for s in own[:10]])  # fmt: skip

    def _largest_file(self) -> str | None:
        """The key and value RLIMIT_FSIZE came from: the output limit, unless said."""
        limits = self.limits
        if limits.largest_file or limits.output_gb is None:
            return limits.largest_file
        return f"{limits.output_names[0]} = {limits.output_gb:g}"

    def _note_refused_tasks(self) -> None:
        """Record, once, that the kernel refused a fork or a thread at pids.max; the count
        goes on into result.json's limits."""
        refused = self.cgroup.pids_refused()
        if not refused or refused <= self.tasks_refused:
            return
        if not self.tasks_refused:
            self.event("limit", limit="max_processes", refused=refused)
        self.tasks_refused = refused

    def _process_limit_reason(self) -> str:
        return (
            f"process limit reached: the kernel refused {self.tasks_refused} new processes "
            f"or threads (limits.max_processes = {self.limits.max_processes})"
        )

    def _exit_verdict(self) -> tuple[str, bool, str]:
        code = self.proc.returncode if self.proc else None
        if code == 0:
            return statuses.OK, False, "exited with code 0"
        if code is not None and code < 0:
            return statuses.CRASH, False, f"killed by signal {-code}"
        return statuses.CRASH, False, f"exited with code {code}"

    def _members(self) -> dict:
        members = self.tree.discover()
        self.tree.reap_inherited(members)
        self.root_exited()
        return members

    def _tree_empty(self, members: dict) -> bool:
        return not alive(members) and self.root_status is not None

    def _stop_tree(self) -> list[dict]:
        """SIGTERM everything, grace, then SIGKILL sweeps; returns what survived."""
        members = self._members()
        # A sandbox wrapper gets no SIGTERM: bubblewrap would die at once and take the
        # program down with SIGKILL, robbing it of its grace. It ends with the program.
        self.tree.signal_all(members, signal.SIGTERM, spare=self.wrappers)
        signals_before = self.signal_count
        grace_end = time.monotonic() + self.settings.term_grace_s
        while time.monotonic() < grace_end:
            members = self._members()
            if self._tree_empty(members):
                return []
            if self.signal_count > signals_before:
                break  # asked again while stopping: no more grace
            self.wait(min(0.05, max(grace_end - time.monotonic(), 0)))
        return self._sweep_kill()

    def _sweep_kill(self) -> list[dict]:
        members = self._members()
        for sweep in range(KILL_SWEEPS):
            if self._tree_empty(members):
                return []
            self.cgroup.kill()
            self.tree.signal_all(members, signal.SIGKILL)
            time.sleep(min(0.02 * (sweep + 1), 0.25))
            members = self._members()
        return [describe(pid, stat) for pid, stat in alive(members).items()]

    def _outcome(self, status, budget_cut, reason, wall_s, cpu_s, reap_left, limits) -> Outcome:
        if self.health.write_failures:
            # The supervisor's own records failed (a full disk); the run itself was watched.
            self.event("health_write_failed", count=self.health.write_failures,
                       error=self.health.write_error)  # fmt: skip
        code = sig = None
        if self.proc is not None and self.proc.returncode is not None:
            rc = self.proc.returncode
            code, sig = (rc, None) if rc >= 0 else (None, -rc)
        return Outcome(
            status=status,
            budget_cut=budget_cut,
            exit_code=code,
            signal=sig,
            wall_s=round(wall_s, 3),
            cpu_s=round(cpu_s, 3),
            reap_left=reap_left,
            reason=reason,
            events=self.events,
            health_jsonl=str(self.health.jsonl),
            health_latest=str(self.health.latest),
            limits=limits,
        )


def supervise(
    argv: list[str],
    *,
    cwd,
    env: dict,
    stdout_path,
    stderr_path,
    health_dir,
    settings: HealthSettings,
    limits: ResourceLimits,
    deadline: Callable[[], float | None] = lambda: None,
    watch_output: Sequence[os.PathLike | str] = (),
    watch_writable: Sequence[os.PathLike | str] = (),
    progress_file: os.PathLike | str | None = None,
    gpu_ids: Sequence[int] | None = None,
    watch_ancestors: bool = True,
    spawn_setup: Callable[[], None] | None = None,
    wrappers: Sequence[str] = (),
    pass_fds: Sequence[int] = (),
    mark_environment: bool = True,
    gpus_unreachable: str | None = None,
) -> Outcome:
    """Run `argv` in its own session under health sampling and the (moving) deadline.

    Returns when the program and every process of its tree are gone (or reported in
    `reap_left`). See docs/ring-folder.md#executions for the statuses and when `budget_cut` is set.
    `wrappers` are executables (a sandbox) that are only ever killed, never sent SIGTERM.
    `gpus_unreachable` says why no GPU device reaches the program (a sandbox that binds
    none): the GPUs are then not watched."""
    if not argv:
        raise InputError("supervise: argv is empty")
    if not isinstance(settings, HealthSettings) or not isinstance(limits, ResourceLimits):
        raise InputError("supervise: settings and limits must be HealthSettings/ResourceLimits")
    return _Supervision(
        argv,
        cwd,
        env,
        stdout_path,
        stderr_path,
        health_dir,
        settings,
        limits,
        deadline,
        watch_output,
        watch_writable,
        progress_file,
        gpu_ids,
        watch_ancestors,
        spawn_setup,
        wrappers,
        pass_fds,
        mark_environment,
        gpus_unreachable,
    ).run()
