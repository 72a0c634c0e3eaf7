"""Is the program doing anything? Pure decisions over successive samples
(docs/operations.md#health-supervision).

Activity in a window = CPU above `min_cpu_frac` of a core, its own GPU compute, I/O above
`min_io_kbps` averaged over the window, a thread in D state while I/O moves, or GPU
queueing. Progress-file rewrites, output growth and folder mtimes are recorded as
supporting evidence only: a loop that merely rewrites a heartbeat is not kept alive.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .sampling import Sample
from .settings import HealthSettings


@dataclass
class Window:
    """What happened between two samples."""

    dt: float
    cpu_frac: float
    io_kbps: float
    gpu_sm_pct: float
    gpu_queueing: bool
    d_state_with_io: bool
    output_growth: int
    progress_changed: bool
    writable_changed: bool
    reasons: list[str] = field(default_factory=list)  # why it counts as active

    @property
    def active(self) -> bool:
        return bool(self.reasons)

    @property
    def busy(self) -> bool:
        """Computing (CPU or GPU) whatever else happens."""
        return "cpu" in self.reasons or "gpu" in self.reasons

    @property
    def shows_progress(self) -> bool:
        """Any sign that work reaches the outside: I/O, output, progress file."""
        return (
            "io" in self.reasons
            or self.output_growth > 0
            or self.progress_changed
            or self.writable_changed
        )

    def to_dict(self) -> dict:
        data = dict(self.__dict__)
        data["active"] = self.active
        for key in ("cpu_frac", "io_kbps", "gpu_sm_pct", "dt"):
            data[key] = round(data[key], 4)
        return data


def judge_window(prev: Sample, cur: Sample, settings: HealthSettings) -> Window:
    """Compare two successful samples and list the kinds of activity above their floors."""
    dt = max(cur.t - prev.t, 1e-6)
    cpu_frac = max(0.0, cur.cpu_s - prev.cpu_s) / dt
    io_delta = max(0, cur.io_bytes - prev.io_bytes)
    storage_delta = max(0, cur.read_bytes - prev.read_bytes) + max(
        0, cur.write_bytes - prev.write_bytes
    )
    io_kbps = max(io_delta, storage_delta) / 1024 / dt
    gpu = cur.gpu
    gpu_sm = gpu.sm_pct_avg if gpu and gpu.available else 0.0
    gpu_max = gpu.sm_pct_max if gpu and gpu.available else 0.0
    queueing = bool(gpu and gpu.available and gpu.queueing)
    d_with_io = cur.d_state_threads > 0 and (io_delta > 0 or storage_delta > 0)
    growth = 0
    if cur.output_bytes is not None and prev.output_bytes is not None:
        growth = max(0, cur.output_bytes - prev.output_bytes)
    progress_changed = (cur.progress or {}).get("mtime") != (prev.progress or {}).get("mtime") or (
        cur.progress or {}
    ).get("content") != (prev.progress or {}).get("content")
    writable_changed = (cur.writable_mtime or 0) > (prev.writable_mtime or 0)
    reasons = []
    if cpu_frac > settings.min_cpu_frac:
        reasons.append("cpu")
    if gpu_sm > 0 or gpu_max > 0:
        reasons.append("gpu")
    if io_kbps > settings.min_io_kbps:
        reasons.append("io")
    if d_with_io:
        reasons.append("d_state_io")
    if queueing:
        reasons.append("gpu_queueing")
    return Window(
        dt=dt,
        cpu_frac=cpu_frac,
        io_kbps=io_kbps,
        gpu_sm_pct=gpu_sm,
        gpu_queueing=queueing,
        d_state_with_io=d_with_io,
        output_growth=growth,
        progress_changed=progress_changed and cur.progress is not None,
        writable_changed=writable_changed,
        reasons=reasons,
    )


class ActivityTracker:
    """Time since the last activity and the events it leads to.

    would_hang (observe mode) and busy_no_progress are logged once per episode; hung
    (enforce mode) asks the supervisor to stop the program.
    """

    def __init__(self, settings: HealthSettings, start_t: float) -> None:
        self.settings = settings
        self.hang_s = settings.hang_min * 60
        self.last_activity_t = start_t
        self.last_progress_t = start_t
        self.busy_since: float | None = None
        self.would_hang_open = False
        self.busy_open = False
        self.hung = False
        self.last_window: Window | None = None

    def idle_s(self, t: float) -> float:
        return max(0.0, t - self.last_activity_t)

    def update(self, window: Window, t: float, wall: float) -> list[dict]:
        """Feed one window ending at monotonic `t`; returns the events it raises."""
        events: list[dict] = []
        self.last_window = window
        if window.active:
            if self.would_hang_open:
                events.append(
                    _event(
                        "would_hang_cleared",
                        wall,
                        idle_s=round(self.idle_s(t), 1),
                        reasons=window.reasons,
                    )
                )
            self.would_hang_open = False
            self.last_activity_t = t
        if window.shows_progress:
            self.last_progress_t = t
            self.busy_open = False
        if window.busy:
            self.busy_since = self.busy_since if self.busy_since is not None else t - window.dt
        else:
            self.busy_since = None
            self.busy_open = False
        idle = self.idle_s(t)
        if idle >= self.hang_s and not window.active:
            if self.settings.enforce:
                if not self.hung:
                    self.hung = True
                    events.append(_event("hung", wall, idle_s=round(idle, 1)))
            elif not self.would_hang_open:
                self.would_hang_open = True
                events.append(_event("would_hang", wall, idle_s=round(idle, 1)))
        quiet = t - self.last_progress_t
        if (
            self.busy_since is not None
            and t - self.busy_since >= self.hang_s
            and quiet >= self.hang_s
            and not self.busy_open
        ):
            self.busy_open = True
            events.append(
                _event(
                    "busy_no_progress",
                    wall,
                    busy_s=round(t - self.busy_since, 1),
                    no_progress_s=round(quiet, 1),
                )
            )
        return events


def _event(name: str, wall: float, **fields) -> dict:
    return {"event": name, "wall": round(wall, 3), **fields}
