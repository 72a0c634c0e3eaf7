"""Where a ring's executions go on SLURM (the partition, the GPU model, whether they ask for
GPUs), as the running driver found it (`cluster.json` in the ring folder, written as the
workflow starts) or as a profile says it (`ringflow check --profile`), and the check of a
configuration's per-execution requests against that partition (docs/slurm.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from ..core.errors import InputError
from ..core.frozen import Frozen, frozen_record
from ..core.jsonio import atomic_write_json, read_json
from ..core.yamlio import load_yaml
from .slurm import (
    Partition,
    Request,
    capacity,
    execution_request,
    query_partition,
    requests_problem,
)

CLUSTER_RECORD = "cluster.json"


@frozen_record
class SlurmTarget(Frozen):
    partition: str | None  # None: the cluster's default partition
    gpu_model: str | None = None
    gpus: bool = False  # the profile declares the `gpu` resource: executions ask for GPUs

    def to_record(self) -> dict:
        return {"executor": "slurm", **asdict(self)}


def write_target(ring_root: Path, target: SlurmTarget) -> None:
    Path(ring_root).mkdir(parents=True, exist_ok=True)
    atomic_write_json(Path(ring_root) / CLUSTER_RECORD, target.to_record())


def read_target(ring_root: Path) -> SlurmTarget | None:
    """The SLURM target the driver recorded for this ring, None when it runs elsewhere."""
    path = Path(ring_root) / CLUSTER_RECORD
    if not path.is_file():
        return None
    record = read_json(path)
    if record.get("executor") != "slurm":
        return None
    return SlurmTarget(record.get("partition"), record.get("gpu_model"), bool(record.get("gpus")))


def _unquote(value) -> str | None:
    if value is None:
        return None
    return str(value).strip().strip("'\"") or None


def _resource_items(value) -> dict:
    """A profile's resources as a mapping, whether written as a mapping or as `k=v` items."""
    if isinstance(value, dict):
        return value
    items = {}
    for item in value or []:
        key, _, val = str(item).partition("=")
        items[key.strip()] = val.strip()
    return items


def profile_target(profile: Path) -> SlurmTarget | None:
    """What a Snakemake profile (a folder with config.yaml, or the file) asks of SLURM for
    the executions; None when its executor is not SLURM's."""
    path = Path(profile)
    path = path / "config.yaml" if path.is_dir() else path
    if not path.is_file():
        raise InputError(f"--profile {profile}: no profile there (no config.yaml)")
    config = load_yaml(path.read_text()) or {}
    if config.get("executor") != "slurm":
        return None
    defaults = _resource_items(config.get("default-resources"))
    execute = _resource_items((config.get("set-resources") or {}).get("execute"))
    declared = _resource_items(config.get("resources"))
    return SlurmTarget(
        partition=_unquote(execute.get("slurm_partition") or defaults.get("slurm_partition")),
        gpu_model=_unquote(execute.get("gpu_model") or defaults.get("gpu_model")),
        gpus="gpu" in declared,
    )


def config_requests(config: dict, target: SlurmTarget) -> list[Request]:
    """One request for the ring's `limits`, and one per view with its own limits."""
    gpus = int(config.get("gpus_per_execution") or 0) if target.gpus else 0
    per_view = config.get("limits_per_view") or {}
    requests = [execution_request(config["limits"], config, gpus)]
    requests += [
        execution_request({**config["limits"], **(limits or {})}, config, gpus, view=view)
        for view, limits in sorted(per_view.items())
    ]
    return [
        Request(r.threads, r.memory_mb, r.gpus, r.runtime_min, target.gpu_model, r.view)
        for r in requests
    ]


def slurm_problem(
    config: dict,
    target: SlurmTarget | None,
    query: Callable[[str | None], Partition] = query_partition,
) -> str | None:
    """Why no node of the target partition can run the ring's executions, or None (also
    when the ring does not run on SLURM)."""
    if target is None:
        return None
    return requests_problem(config_requests(config, target), query(target.partition))


def cluster_slots(
    config: dict,
    target: SlurmTarget,
    query: Callable[[str | None], Partition] = query_partition,
) -> int:
    """Executions of the ring the target partition runs at once: for each view's request,
    what its nodes hold side by side; the smallest of these (docs/slurm.md#the-reserve)."""
    partition = query(target.partition)
    return min(capacity(partition, request) for request in config_requests(config, target))
