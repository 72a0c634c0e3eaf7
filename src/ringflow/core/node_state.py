"""A node (`nodes/<node>/node.json`) and an execution (`nodes/<node>/exec/<view>/<variant>/
result.json`) as typed, frozen objects, read and written here only (docs/architecture.md).

Both are deciding records: `write_node` and `write_result` write them through
`core.records.write_record`, which hashes them into the ring's ledger. The top-level keys are
typed fields, their statuses and weights mode members of `core.statuses`; nested free-form
records (a node's solution and planned executions, a result's limits and sandbox, …) stay
mappings. `to_record()` gives back exactly the record that was read, keys it does not know
included, so a record written back, hashed or carried to another ring is the same.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import field
from pathlib import Path
from typing import Any

from .errors import InputError
from .frozen import frozen_record
from .jsonio import read_json
from .records import write_record
from .state import KeptRecord, record_of, split_record
from .statuses import ExecutionStatus, NodeStatus, WeightsMode


@frozen_record
class Node(KeptRecord):
    id: str
    name: str | None = None
    role: str | None = None
    status: NodeStatus | str | None = None
    error: str | None = None
    created_at: float | None = None
    origin: Mapping[str, Any] = field(default_factory=dict)
    parent: str | None = None
    operator: Any = None
    queries_used: int | None = None
    timestamps: Mapping[str, Any] = field(default_factory=dict)
    session: Mapping[str, Any] | None = None
    tree_hash: str | None = None
    solution: Mapping[str, Any] | None = None
    executions: Mapping[str, Any] = field(default_factory=dict)
    carryover: Mapping[str, Any] | None = None
    imported: Mapping[str, Any] | None = None
    resume_origin: Mapping[str, Any] | None = None

    @classmethod
    def from_record(cls, record: Mapping[str, Any], source: str | Path | None = None) -> Node:
        """A Node from a node.json record; `source` names the file in errors."""
        values, extra = _split(cls, record, source, "a node record", ("id",))
        if "status" in values:
            values["status"] = _member(values["status"], NodeStatus)
        return cls(**values, extra=extra, _keys=frozenset(record))

    def to_record(self) -> dict[str, Any]:
        """The node.json record: equal to the one read."""
        return record_of(self)

    def spec(self, view: str, variant: str) -> Mapping[str, Any] | None:
        """The planned execution of `view`/`variant` (its seed, weights and key), or None."""
        return (self.executions.get(view) or {}).get(variant)


@frozen_record
class ExecutionResult(KeptRecord):
    status: ExecutionStatus | str
    node: str | None = None
    view: str | None = None
    variant: str | None = None
    seed: int | None = None
    ablate: bool = False
    budget_cut: bool = False
    exit_code: int | None = None
    signal: int | None = None
    wall_s: float | None = None
    cpu_s: float | None = None
    weights_mode: WeightsMode | str | None = None
    weights_key: str | None = None
    replay_method: str | None = None
    reap_left: tuple[Any, ...] = ()
    reason: str | None = None
    events: tuple[Any, ...] = ()
    limits: Mapping[str, Any] | None = None
    health: Mapping[str, Any] | None = None
    sandbox: Mapping[str, Any] | None = None
    gpus: tuple[Any, ...] | None = None
    output_dropped: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    ledger_head: Mapping[str, Any] | None = None
    # The SLURM job that ran it, where one did, and the state SLURM ended it in where SLURM
    # killed it (docs/slurm.md#job-ids-signals-and-kills); written only when set.
    slurm_job_id: str | None = None
    slurm_state: str | None = None

    @classmethod
    def from_record(
        cls, record: Mapping[str, Any], source: str | Path | None = None
    ) -> ExecutionResult:
        """An ExecutionResult from a result.json record; `source` names the file in errors."""
        values, extra = _split(cls, record, source, "an execution result", ("status",))
        values["status"] = _member(values["status"], ExecutionStatus)
        if "weights_mode" in values:
            values["weights_mode"] = _member(values["weights_mode"], WeightsMode)
        return cls(**values, extra=extra, _keys=frozenset(record))

    def to_record(self) -> dict[str, Any]:
        """The result.json record: equal to the one read (lists stay lists)."""
        return record_of(self)

    @property
    def ok(self) -> bool:
        return self.status == ExecutionStatus.OK


def starting_record(
    node: str, view: str, variant: str, spec: Mapping[str, Any], started_at: float | None
) -> dict[str, Any]:
    """The result.json record an execution starts from: interrupted until it ends, so a run
    killed before it writes more (by a signal, or by SLURM) is recorded as interrupted."""
    return {
        "node": node,
        "view": view,
        "variant": variant,
        "seed": spec.get("seed"),
        "ablate": spec.get("ablate"),
        "status": ExecutionStatus.INTERRUPTED,
        "budget_cut": False,
        "exit_code": None,
        "signal": None,
        "wall_s": 0.0,
        "cpu_s": 0.0,
        "weights_mode": WeightsMode.NONE,
        "weights_key": spec.get("key"),
        "reap_left": [],
        "reason": "",
        "started_at": started_at,
    }


def read_node(path: str | os.PathLike) -> Node:
    """The node.json at `path`."""
    return Node.from_record(read_json(path, what=str(path)), source=path)


def node_if_any(path: str | os.PathLike) -> Node | None:
    """The node.json at `path`, or None when there is none that can be read as a node."""
    try:
        return read_node(path)
    except (OSError, InputError):
        return None


def write_node(ring_root: str | os.PathLike, path: str | os.PathLike, node: Node) -> dict:
    """Write a node.json and hash it into the ring's ledger."""
    return write_record(ring_root, path, node.to_record())


def read_result(path: str | os.PathLike) -> ExecutionResult:
    """The result.json at `path`."""
    return ExecutionResult.from_record(read_json(path, what=str(path)), source=path)


def result_if_any(path: str | os.PathLike) -> ExecutionResult | None:
    """The result.json at `path`, or None when there is none, or none that can be read as a
    result (a live ring's status lines and reports never fail on one file)."""
    try:
        return read_result(path)
    except (OSError, InputError):
        return None


def write_result(
    ring_root: str | os.PathLike, path: str | os.PathLike, result: ExecutionResult
) -> dict:
    """Write a result.json and hash it into the ring's ledger."""
    return write_record(ring_root, path, result.to_record())


# Fields whose JSON lists are held as tuples (and written back as lists).
_SEQUENCES = frozenset({"reap_left", "events", "gpus"})


def _split(cls, record, source, what: str, required: tuple[str, ...]):
    """(field values, unknown keys) of `record`, refused when it is not one."""
    where = str(source) if source is not None else what.split(" ", 1)[1]
    if not isinstance(record, Mapping):
        raise InputError(f"{where}: {what} must be a JSON object")
    missing = [key for key in required if key not in record]
    if missing:
        raise InputError(f"{where}: not {what} (missing {', '.join(map(repr, missing))})")
    return split_record(cls, record, _SEQUENCES)


def _member(value: Any, *vocabularies: type) -> Any:
    """`value` as a member of the first vocabulary that has it; any other value as it is
    (the same text either way)."""
    for vocabulary in vocabularies:
        try:
            return vocabulary(value)
        except (ValueError, TypeError):
            continue
    return value
