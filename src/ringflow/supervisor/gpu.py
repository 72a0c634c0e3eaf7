"""GPU figures attributed to the execution's own PIDs, read in-process through NVML.

One `nvmlInit` serves the whole supervisor process and is never shut down while it
runs; no `nvidia-smi` is ever spawned. No GPU (the library is missing, or any NVML error
at init) is a normal case: the probe is recorded unavailable and attribution is "none".

Attribution per poll:
- "pid": NVML's process list is matched against our tree (SM% per process from
  `nvmlDeviceGetProcessUtilization`, memory from the compute-process list).
- "device": NVML lists processes on the GPUs assigned to us, none of them ours and none
  visible in our /proc (we live in another PID namespace): the assigned GPUs' device
  figures are used instead. Never whole-card figures of GPUs not assigned to us.
- "none": no NVML.

The NVML module is a parameter so that a stand-in can be given where no GPU exists;
by default the real `pynvml` (nvidia-ml-py) is used.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

COMPUTE_PROCESS_FUNCTIONS = (
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetComputeRunningProcesses_v2",
    "nvmlDeviceGetComputeRunningProcesses",
)

_lock = threading.Lock()
_default: tuple[Any, str] | None = None  # (module or None, reason) of the shared session


def open_nvml(nvml: Any = None) -> tuple[Any, str]:
    """Initialise NVML once per process (or the given stand-in); returns (module|None, why)."""
    global _default
    if nvml is not None:
        return _init(nvml)
    with _lock:
        if _default is None:
            try:
                import pynvml
            except ImportError as exc:
                _default = (None, f"pynvml not importable: {exc}")
            else:
                _default = _init(pynvml)
        return _default


def _init(nvml: Any) -> tuple[Any, str]:
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, driver errors: no usable GPU
        return None, f"nvmlInit failed: {type(exc).__name__}: {exc}"
    return nvml, ""


def parse_visible_devices(value: str | None) -> list[str] | None:
    """CUDA_VISIBLE_DEVICES as a list of indices/UUIDs; None when unset (unknown)."""
    if value is None:
        return None
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items or items[0] in ("-1", "NoDevFiles"):
        return []
    return items


@dataclass
class GpuWindow:
    """GPU figures over one collection window."""

    available: bool
    attribution: str  # "pid" | "device" | "none"
    reason: str = ""
    sm_pct_avg: float = 0.0
    sm_pct_max: float = 0.0
    memory_bytes_max: int = 0
    pids: list[int] = field(default_factory=list)
    queueing: bool = False
    polls: int = 0
    errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


class GpuMonitor:
    """Polls NVML often (about every second) and integrates our SM% between takes."""

    def __init__(
        self,
        gpu_ids: Sequence[int] | None = None,
        env: Mapping[str, str] | None = None,
        nvml: Any = None,
        pid_visible=lambda pid: os.path.exists(f"/proc/{pid}"),
        off: str | None = None,
    ) -> None:
        # `off`: why this run has nothing to watch (no GPU device reaches it); NVML is then
        # neither loaded nor initialised, which costs a CPU-only run more than its sampling.
        self.nvml, self.reason = (None, off) if off else open_nvml(nvml)
        self.pid_visible = pid_visible
        self.handles: dict[int, Any] = {}
        self.assigned: list[int] = []
        self._compute_fn: str | None = None
        self._last_seen_us: dict[int, int] = {}
        self._last_poll: float | None = None
        self._window_start = time.monotonic()
        self._reset()
        if self.nvml is None:
            return
        try:
            count = self.nvml.nvmlDeviceGetCount()
            self.handles = {i: self.nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)}
        except self.nvml.NVMLError as exc:
            self.reason = f"cannot enumerate GPUs: {exc}"
            self.nvml = None
            return
        self.assigned = self._resolve_assigned(gpu_ids, env)
        now_us = int(time.time() * 1e6)
        self._last_seen_us = dict.fromkeys(self.handles, now_us)

    @property
    def available(self) -> bool:
        return self.nvml is not None

    def _resolve_assigned(
        self, gpu_ids: Sequence[int] | None, env: Mapping[str, str] | None
    ) -> list[int]:
        if gpu_ids is not None:
            return [i for i in gpu_ids if i in self.handles]
        visible = parse_visible_devices((env or {}).get("CUDA_VISIBLE_DEVICES"))
        if visible is None:
            return []
        assigned = []
        for item in visible:
            if item.isdigit():
                if int(item) in self.handles:
                    assigned.append(int(item))
                continue
            for index, handle in self.handles.items():
                try:
                    uuid = self.nvml.nvmlDeviceGetUUID(handle)
                except self.nvml.NVMLError:
                    continue
                if isinstance(uuid, bytes):
                    uuid = uuid.decode()
                if uuid.startswith(item) or item.startswith(uuid):
                    assigned.append(index)
        return assigned

    def _reset(self) -> None:
        self._sm_integral = 0.0
        self._sm_max = 0.0
        self._mem_max = 0
        self._pids: set[int] = set()
        self._queueing = False
        self._polls = 0
        self._attribution: str | None = None
        self._errors: list[str] = []

    def compute_processes(self, handle: Any) -> list[Any]:
        """Compute processes with the v3 -> v2 -> v1 fallback, as this binding offers them."""
        nvml = self.nvml
        names = [self._compute_fn] if self._compute_fn else COMPUTE_PROCESS_FUNCTIONS
        last_error: Exception | None = None
        for name in names:
            fn = getattr(nvml, name, None)
            if fn is None:
                continue
            try:
                procs = fn(handle)
            except nvml.NVMLError as exc:
                if _error_value(exc) in _missing_function_codes(nvml):
                    last_error = exc
                    continue
                raise
            self._compute_fn = name
            return list(procs)
        if last_error is not None:
            raise last_error
        raise AttributeError("the NVML binding offers no compute-process function")

    def process_utilization(self, index: int, handle: Any) -> list[Any]:
        """Samples newer than the last one seen; NOT_FOUND means no new sample (zero)."""
        nvml = self.nvml
        try:
            samples = nvml.nvmlDeviceGetProcessUtilization(handle, self._last_seen_us[index])
        except nvml.NVMLError as exc:
            # pynvml raises NVMLError(SUCCESS) when the size probe finds nothing to return.
            if _error_value(exc) in (nvml.NVML_ERROR_NOT_FOUND, getattr(nvml, "NVML_SUCCESS", 0)):
                return []
            raise
        samples = list(samples)
        if samples:
            newest = max(int(s.timeStamp) for s in samples)
            self._last_seen_us[index] = max(self._last_seen_us[index], newest)
        return samples

    def poll(self, tree_pids: Iterable[int], now: float | None = None) -> None:
        """Read every GPU once and integrate our SM% over the time since the last poll."""
        if self.nvml is None:
            return
        now = time.monotonic() if now is None else now
        dt = 0.0 if self._last_poll is None else max(0.0, now - self._last_poll)
        self._last_poll = now
        ours = set(tree_pids)
        sm_total, mem_total, foreign, found_ours = 0.0, 0, [], False
        device_util: dict[int, float] = {}
        device_mem: dict[int, int] = {}
        try:
            for index, handle in self.handles.items():
                procs = self.compute_processes(handle)
                mine = [p for p in procs if int(p.pid) in ours]
                foreign.extend(int(p.pid) for p in procs if int(p.pid) not in ours)
                samples = self.process_utilization(index, handle)
                per_pid: dict[int, list[float]] = {}
                for s in samples:
                    per_pid.setdefault(int(s.pid), []).append(float(s.smUtil))
                device_sm = sum(sum(v) / len(v) for pid, v in per_pid.items() if pid in ours)
                util = float(self.nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
                device_util[index] = util
                device_mem[index] = int(self.nvml.nvmlDeviceGetMemoryInfo(handle).used)
                if mine:
                    found_ours = True
                    self._pids.update(int(p.pid) for p in mine)
                    mem_total += sum(int(p.usedGpuMemory or 0) for p in mine)
                    sm_total += device_sm
                    if device_sm == 0 and util > 0:
                        self._queueing = True  # our context waits while others compute
        except (self.nvml.NVMLError, AttributeError) as exc:
            self._errors.append(f"{type(exc).__name__}: {exc}")
            return
        namespaced = (
            not found_ours
            and self.assigned
            and foreign
            and not any(self.pid_visible(pid) for pid in foreign)
        )
        if namespaced:
            attribution = "device"
            sm_total = sum(device_util[i] for i in self.assigned)
            mem_total = sum(device_mem[i] for i in self.assigned)
        else:
            attribution = "pid"
        self._attribution = attribution
        self._polls += 1
        self._sm_integral += sm_total * dt
        self._sm_max = max(self._sm_max, sm_total)
        self._mem_max = max(self._mem_max, mem_total)

    def take(self, now: float | None = None) -> GpuWindow:
        """The figures since the previous take, then start a new window."""
        now = time.monotonic() if now is None else now
        if self.nvml is None:
            return GpuWindow(available=False, attribution="none", reason=self.reason)
        span = max(now - self._window_start, 1e-9)
        window = GpuWindow(
            available=True,
            attribution=self._attribution or "pid",
            sm_pct_avg=round(self._sm_integral / span, 3),
            sm_pct_max=self._sm_max,
            memory_bytes_max=self._mem_max,
            pids=sorted(self._pids),
            queueing=self._queueing,
            polls=self._polls,
            errors=self._errors[:5],
        )
        self._window_start = now
        self._reset()
        return window


def _error_value(exc: Exception) -> Any:
    return getattr(exc, "value", None)


def _missing_function_codes(nvml: Any) -> tuple:
    return tuple(
        getattr(nvml, name)
        for name in ("NVML_ERROR_FUNCTION_NOT_FOUND", "NVML_ERROR_NOT_SUPPORTED")
        if hasattr(nvml, name)
    )
