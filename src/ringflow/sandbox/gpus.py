"""GPUs for one execution: which devices it gets, and what of them the sandbox shows.

Under a scheduler that allocates GPUs (SLURM sets CUDA_VISIBLE_DEVICES for the job), the
job's own allocation is used as it is. Otherwise each of the machine's GPUs is one slot,
taken under a file lock for the execution's lifetime, so that executions running at once
(as many as `profiles/gpu` lets run: one per GPU by default) never share a device.
Devices are named to the program by UUID: indices and device minor numbers differ, and
`CUDA_VISIBLE_DEVICES` indices would be renumbered inside the job anyway.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from ringflow.core.errors import DeadlineReached, SandboxError
from ringflow.supervisor.gpu import open_nvml, parse_visible_devices

from ..core.frozen import Frozen, frozen_record

# Device nodes every CUDA program needs besides its own GPUs' /dev/nvidia<minor>.
SHARED_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
CAPS_DIR = "nvidia-caps"
POLL_S = 0.5


@frozen_record
class Gpu(Frozen):
    index: int  # NVML index on this machine
    uuid: str
    minor: int
    name: str

    def to_dict(self) -> dict:
        return {"index": self.index, "uuid": self.uuid, "minor": self.minor, "name": self.name}


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def machine_gpus(nvml=None) -> list[Gpu]:
    """Every GPU NVML sees here; [] without NVML or a GPU."""
    module, _ = open_nvml(nvml)
    if module is None:
        return []
    gpus = []
    for index in range(module.nvmlDeviceGetCount()):
        handle = module.nvmlDeviceGetHandleByIndex(index)
        gpus.append(
            Gpu(
                index=index,
                uuid=_text(module.nvmlDeviceGetUUID(handle)),
                minor=int(module.nvmlDeviceGetMinorNumber(handle)),
                name=_text(module.nvmlDeviceGetName(handle)),
            )
        )
    return gpus


def gpu_facts(nvml=None) -> dict:
    """GPU models, driver and CUDA versions: recorded in RING.json, part of the environment
    key of executions given GPUs. Empty lists where there is no GPU."""
    module, reason = open_nvml(nvml)
    if module is None:
        return {"gpus": [], "driver": None, "cuda": None, "reason": reason}
    cuda = module.nvmlSystemGetCudaDriverVersion()
    return {
        "gpus": sorted({gpu.name for gpu in machine_gpus(module)}),
        "driver": _text(module.nvmlSystemGetDriverVersion()),
        "cuda": f"{cuda // 1000}.{cuda % 1000 // 10}",
    }


def device_nodes(gpus: list[Gpu], dev_root: Path = Path("/dev")) -> list[tuple[str, str]]:
    """(host path, path inside) of the device nodes the given GPUs need."""
    nodes = [(dev_root / f"nvidia{gpu.minor}", Path("/dev") / f"nvidia{gpu.minor}") for gpu in gpus]
    for name in (*SHARED_NODES, CAPS_DIR):
        nodes.append((dev_root / name, Path("/dev") / name))
    return [(str(host), str(inside)) for host, inside in nodes if host.exists()]


@dataclass
class Allocation:
    gpus: list[Gpu]
    how: str  # "scheduler" | "lock"

    @property
    def visible_devices(self) -> str:
        return ",".join(gpu.uuid for gpu in self.gpus)


def scheduler_allocation(env: dict, gpus: list[Gpu]) -> list[Gpu] | None:
    """The GPUs a SLURM job was given (by index or UUID), or None outside such a job."""
    if "SLURM_JOB_ID" not in env:
        return None
    visible = parse_visible_devices(env.get("CUDA_VISIBLE_DEVICES"))
    if visible is None:
        return None
    chosen = []
    for item in visible:
        match = [
            g for g in gpus if g.uuid == item or g.uuid.startswith(item) or str(g.index) == item
        ]
        if not match:
            raise SandboxError(f"CUDA_VISIBLE_DEVICES names {item!r}, which NVML does not see")
        chosen.append(match[0])
    return chosen


def allocate(
    count: int,
    lock_dir: Path,
    stack: ExitStack,
    *,
    should_stop: Callable[[], str | None],
    env: dict | None = None,
    nvml=None,
) -> Allocation:
    """`count` GPUs for this execution, held until `stack` closes.

    Waits (following the moving deadline through `should_stop`) while every GPU is taken;
    raises SandboxError when the machine has fewer GPUs than asked for.
    """
    gpus = machine_gpus(nvml)
    given = scheduler_allocation(env if env is not None else dict(os.environ), gpus)
    if given is not None:
        if len(given) < count:
            raise SandboxError(
                f"the job was given {len(given)} GPU(s), the execution needs {count}"
            )
        return Allocation(given[:count], "scheduler")
    if len(gpus) < count:
        raise SandboxError(f"the execution needs {count} GPU(s); NVML sees {len(gpus)} here")
    lock_dir.mkdir(parents=True, exist_ok=True)
    while True:
        held: list[Gpu] = []
        attempt = ExitStack()
        for gpu in gpus:
            lock = FileLock(str(lock_dir / f"{gpu.uuid}.lock"))
            try:
                lock.acquire(timeout=0)
            except Timeout:
                continue
            attempt.callback(lock.release)
            held.append(gpu)
            if len(held) == count:
                stack.push(attempt.pop_all())
                return Allocation(held, "lock")
        attempt.close()
        why = should_stop()
        if why is not None:
            raise DeadlineReached(f"no free GPU before the deadline ({why})")
        time.sleep(POLL_S)


def default_lock_dir() -> Path:
    """One per machine and user: GPUs are a machine's, whatever the ring or store."""
    base = os.environ.get("XDG_RUNTIME_DIR") or "/tmp"
    return Path(base) / f"ringflow-gpus-{os.getuid()}"
