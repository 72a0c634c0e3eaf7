"""health.jsonl (one summary line per interval) and health_latest.json (every sample).

Each line carries maxima and cumulative values over its interval, so a burst between two
lines is never lost, plus the GPU attribution and which probes were available.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path

from ..core.jsonio import append_jsonl, atomic_write_json
from .activity import Window
from .sampling import Sample


def _max(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)


def _min(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


class _Interval:
    def __init__(
        self, index: int, start_wall: float, start_t: float, start_cpu: float, start_io: int
    ) -> None:
        self.index = index
        self.start_wall = start_wall
        self.start_t = start_t
        self.start_cpu = start_cpu
        self.start_io = start_io
        self.samples = 0
        self.failed = 0
        self.last: Sample | None = None
        self.cpu_frac_max = 0.0
        self.io_kbps_max = 0.0
        self.procs_max = 0
        self.threads_max = 0
        self.rss_max = 0
        self.states_max: dict[str, int] = {}
        self.wchans: Counter = Counter()
        self.gpu_sm_max = 0.0
        self.gpu_sm_time = 0.0  # SM% x seconds, for the average over the interval
        self.gpu_mem_max = 0
        self.gpu_queueing = False
        self.gpu_pids: set[int] = set()
        self.gpu_attribution: str | None = None
        self.mem_usage_max: int | None = None
        self.mem_headroom_min: int | None = None
        self.output_growth = 0
        self.windows = 0
        self.active_windows = 0
        self.reasons: Counter = Counter()
        self.progress_changes = 0
        self.events: list[dict] = []

    def add(self, sample: Sample, window: Window | None) -> None:
        if not sample.ok:
            self.failed += 1
            return
        self.samples += 1
        self.last = sample
        self.procs_max = max(self.procs_max, sample.n_procs)
        self.threads_max = max(self.threads_max, sample.n_threads)
        self.rss_max = max(self.rss_max, sample.rss_bytes)
        for state, count in sample.thread_states.items():
            self.states_max[state] = max(self.states_max.get(state, 0), count)
        self.wchans.update(sample.wchans)
        self.mem_usage_max = _max(self.mem_usage_max, sample.memory_usage_bytes)
        self.mem_headroom_min = _min(self.mem_headroom_min, sample.memory_headroom_bytes)
        if sample.gpu is not None:
            self.gpu_attribution = sample.gpu.attribution
            self.gpu_sm_max = max(self.gpu_sm_max, sample.gpu.sm_pct_max)
            self.gpu_mem_max = max(self.gpu_mem_max, sample.gpu.memory_bytes_max)
            self.gpu_queueing = self.gpu_queueing or sample.gpu.queueing
            self.gpu_pids.update(sample.gpu.pids)
        if window is not None:
            self.windows += 1
            self.active_windows += window.active
            self.reasons.update(window.reasons)
            self.cpu_frac_max = max(self.cpu_frac_max, window.cpu_frac)
            self.io_kbps_max = max(self.io_kbps_max, window.io_kbps)
            self.gpu_sm_time += window.gpu_sm_pct * window.dt
            self.output_growth += window.output_growth
            self.progress_changes += window.progress_changed

    def line(self, end_wall: float, end_t: float, idle_s: float, probes: dict) -> dict:
        last = self.last
        span = max(end_t - self.start_t, 1e-9)
        cpu_end = last.cpu_s if last else self.start_cpu
        io_end = last.io_bytes if last else self.start_io
        return {
            "interval": self.index,
            "start": round(self.start_wall, 3),
            "end": round(end_wall, 3),
            "samples": self.samples,
            "samples_failed": self.failed,
            "cpu_s_cumulative": round(cpu_end, 3),
            "cpu_s_interval": round(cpu_end - self.start_cpu, 3),
            "cpu_frac_avg": round((cpu_end - self.start_cpu) / span, 4),
            "cpu_frac_max": round(self.cpu_frac_max, 4),
            "io_bytes_cumulative": io_end,
            "io_bytes_interval": io_end - self.start_io,
            "io_kbps_max": round(self.io_kbps_max, 2),
            "read_bytes_cumulative": last.read_bytes if last else None,
            "write_bytes_cumulative": last.write_bytes if last else None,
            "procs_max": self.procs_max,
            "threads_max": self.threads_max,
            "rss_bytes_max": self.rss_max,
            "thread_states_max": self.states_max,
            "wchans": dict(self.wchans.most_common(8)),
            "memory_usage_bytes_max": self.mem_usage_max,
            "memory_headroom_bytes_min": self.mem_headroom_min,
            "oom_kills": last.oom_kills if last else None,
            "output_bytes": last.output_bytes if last else None,
            "output_growth_bytes": self.output_growth,
            "writable_mtime": last.writable_mtime if last else None,
            "progress": last.progress if last else None,
            "progress_changes": self.progress_changes,
            "gpu_attribution": self.gpu_attribution or probes.get("gpu_attribution", "none"),
            "gpu_sm_pct_max": self.gpu_sm_max,
            "gpu_sm_pct_avg": round(self.gpu_sm_time / span, 3),
            "gpu_memory_bytes_max": self.gpu_mem_max,
            "gpu_queueing": self.gpu_queueing,
            "gpu_pids": sorted(self.gpu_pids),
            "windows": self.windows,
            "active_windows": self.active_windows,
            "activity_reasons": dict(self.reasons),
            "idle_s": round(idle_s, 1),
            "events": self.events,
            "probes": probes,
        }


class HealthLog:
    """Writes the two health files of one execution.

    A write that fails (a full disk) is counted and the supervision goes on: the program is
    still watched and stopped, and the outcome says the health files are incomplete."""

    def __init__(
        self,
        health_dir: os.PathLike | str,
        interval_s: float,
        start_t: float,
        start_wall: float,
        meta: dict,
    ) -> None:
        self.dir = Path(health_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.jsonl = self.dir / "health.jsonl"
        self.latest = self.dir / "health_latest.json"
        self.interval_s = interval_s
        self.meta = meta
        self.probes: dict = {}
        self.lines_written = 0
        self.write_failures = 0
        self.write_error: str | None = None
        self._current = _Interval(0, start_wall, start_t, 0.0, 0)

    def event(self, event: dict) -> None:
        """An event that belongs in the current interval's line."""
        self._current.events.append(event)

    def record(self, sample: Sample, window: Window | None, idle_s: float, state: str) -> None:
        """Add one sample; write the interval's line when it is complete; rewrite latest."""
        if sample.ok:
            self.probes = dict(sample.probes)
            if sample.gpu is not None:
                self.probes["gpu_attribution"] = sample.gpu.attribution
        cur = self._current
        while sample.t - cur.start_t >= self.interval_s:
            boundary_t = cur.start_t + self.interval_s
            boundary_wall = cur.start_wall + self.interval_s
            self._flush(boundary_wall, boundary_t, idle_s)
            last = cur.last
            cur = self._current = _Interval(
                cur.index + 1,
                boundary_wall,
                boundary_t,
                last.cpu_s if last else cur.start_cpu,
                last.io_bytes if last else cur.start_io,
            )
        cur.add(sample, window)
        self.write_latest(state, sample, window, idle_s)

    def _flush(self, end_wall: float, end_t: float, idle_s: float, partial: bool = False) -> None:
        cur = self._current
        if cur.samples == 0 and cur.failed == 0 and not cur.events:
            return
        line = cur.line(end_wall, end_t, idle_s, self.probes)
        line["partial"] = partial

        # The supervision loop never waits on the disk: lines are synced once, at the end.
        def append(path: Path, data: dict) -> None:
            append_jsonl(path, data, fsync=partial)  # the last line, at close, is synced

        if self._written(append, self.jsonl, line):
            self.lines_written += 1

    def _written(self, write, path: Path, data: dict) -> bool:
        try:
            write(path, data)
        except OSError as exc:
            self.write_failures += 1
            self.write_error = self.write_error or f"{path.name}: {exc}"
            return False
        return True

    def write_latest(
        self,
        state: str,
        sample: Sample | None,
        window: Window | None,
        idle_s: float,
        extra: dict | None = None,
    ) -> None:
        data = {
            **self.meta,
            "state": state,
            "updated": round(time.time(), 3),
            "idle_s": round(idle_s, 1),
            "gpu_attribution": self.probes.get("gpu_attribution", "none"),
            "probes": self.probes,
            "sample": sample.summary() if sample else None,
            "window": window.to_dict() if window else None,
        }
        if extra:
            data.update(extra)

        # A live view, never synced: what ended the run is in result.json and in the
        # timeline's last line (synced at close), and a run a crash cut runs again.
        def write(path: Path, data: dict) -> None:
            atomic_write_json(path, data, durable=False)

        self._written(write, self.latest, data)

    def close(self, end_t: float, idle_s: float, final: dict) -> None:
        """Write the last (possibly partial) interval and the final latest file."""
        self._flush(time.time(), end_t, idle_s, partial=True)
        last = self._current.last
        self.write_latest("ended", last, None, idle_s, {"outcome": final})
