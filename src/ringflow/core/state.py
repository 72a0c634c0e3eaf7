"""The locked ring (RING.json) as a typed, frozen object.

`ring/lock.py` writes the record once; every job reads it through `Ring.from_record` (via
`core.clock.load_ring`). The top-level keys are typed fields, the configuration a
`core.settings.RingConfig`, the task a `LockedTask`, each view a `LockedView`, the
program's interpreter a `LockedProgram` and the sandbox a `LockedSandbox`. The environment
and the evaluation stay mappings: each is hashed whole into keys (the environment key, the
scorer's version), and their shape is what the probes found. `to_record()` gives back
exactly the record that was read, so a lock written back or hashed is the same.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import field
from pathlib import Path
from typing import Any

from .errors import InputError
from .frozen import Frozen, frozen_record
from .layout import RingLayout
from .settings import RingConfig

# Fields whose JSON lists are held as tuples (and written back as lists).
_SEQUENCES = frozenset(
    {"search_views", "guard_views", "guard_seeds", "chain_exposed_seeds", "tree_ignore"}
)
_REQUIRED = ("ring_id", "ring_dir")


@frozen_record
class KeptRecord(Frozen):
    """A record read from a file and kept key for key: the keys no field names (`extra`)
    and the keys the record held (`_keys`, so that `record_of` leaves out the defaults of
    the others). Both are keyword-only: a subclass's own fields keep their positions."""

    extra: Mapping[str, Any] = field(default_factory=dict, repr=False, kw_only=True)
    _keys: frozenset[str] = field(default=frozenset(), repr=False, compare=False, kw_only=True)


class LockedRecord(KeptRecord):
    """A nested record of the lock as a frozen dataclass: its keys as fields (None where a
    record lacks one), unknown keys kept in `extra`, and `to_record()` giving back the
    record it was read from, key for key."""

    KIND = "record"

    @classmethod
    def from_record(cls, record: Mapping[str, Any], where: str | None = None):
        if not isinstance(record, Mapping):
            raise InputError(f"{where or cls.KIND}: a locked {cls.KIND} must be a JSON object")
        values, extra = split_record(cls, record)
        return cls(**values, extra=extra, _keys=frozenset(record))

    def to_record(self) -> dict[str, Any]:
        return record_of(self)


@frozen_record
class LockedView(LockedRecord):
    """One view as the lock fixed it (RING.json `views`, written by ring/lock.py): where its
    data is, what it hashed to, the snapshot the programs read, and its limits."""

    KIND = "view"

    name: str | None = None
    dir: str | None = None
    # The hash of everything in the view (inputs and labels), which tells a view by content.
    content_hash: str | None = None
    # Weights keys take the inputs only; the labels belong to the evaluation.
    inputs_hash: str | None = None
    labels_hash: str | None = None
    files: int | None = None
    bytes: int | None = None
    input_bytes: int | None = None
    limits: Mapping[str, Any] | None = None
    # The read-only copy of the inputs that programs see, and its listing as taken
    # ([path, size, mtime_ns, ctime_ns, inode, sha256] each) to check it against.
    inputs_snapshot: str | None = None
    inputs_files: Any = None
    env_key: str | None = None

    @property
    def snapshot(self) -> Path:
        """The read-only copy of the view's inputs that programs read."""
        if self.inputs_snapshot is None:
            raise InputError(f"view {self.name}: the lock recorded no inputs snapshot")
        return Path(self.inputs_snapshot)

    @property
    def size_bytes(self) -> int | None:
        """The inputs' size (what a run reads), or the whole view's in older locks."""
        return self.input_bytes if self.input_bytes is not None else self.bytes


@frozen_record
class LockedTask(LockedRecord):
    """The task as the lock fixed it (RING.json `task`, `task.Task.to_dict()`): its folder,
    name and direction, the scorer's and validator's commands and how the scorer scores."""

    KIND = "task"

    dir: str | None = None
    name: str | None = None
    direction: str | None = None
    scorer: str | None = None
    validator: str | None = None
    views: Any = None
    reorder_rows: Any = None
    roles: Mapping[str, Any] | None = None
    scorer_bootstrap: bool | None = None
    # "resample", "rows" or "fixed" (docs/guard.md#scorer-modes); rings locked before modes
    # were declared resample.
    scorer_mode: str | None = None

    @property
    def mode(self) -> str:
        return self.scorer_mode or "resample"

    @property
    def rows_reordered(self) -> tuple[str, ...]:
        """The view files whose rows a disguised copy reorders."""
        return tuple(self.reorder_rows or ())


@frozen_record
class LockedProgram(LockedRecord):
    """The interpreter every program of the ring runs with (RING.json `program`, described
    at the lock): its executable, its prefixes and version, and the folders a sandbox
    binds so that it runs there."""

    KIND = "program"

    executable: str | None = None
    path: str | None = None
    prefix: str | None = None
    base_prefix: str | None = None
    version: str | None = None
    dirs: Any = None

    @property
    def python(self) -> str:
        if not self.executable:
            raise InputError("the lock recorded no program interpreter (RING.json program)")
        return self.executable

    @property
    def bound_dirs(self) -> tuple[Path, ...]:
        """The folders the interpreter needs inside a sandbox."""
        return tuple(Path(d) for d in self.dirs or ())


@frozen_record
class LockedSandbox(LockedRecord):
    """How this machine confines programs, as the lock found it (RING.json `sandbox`):
    `mode` is how (docs/contracts.md#sandbox), "none" where programs run unconfined,
    and `reason` why."""

    KIND = "sandbox"

    mode: str | None = None
    reason: str | None = None

    @property
    def confined(self) -> bool:
        return self.mode != "none"


@frozen_record
class Ring(KeptRecord):
    ring_id: str
    ring_dir: str
    created_at: float | None = None
    start: float | None = None
    stop_at: float | None = None
    initial_cutoff: float | None = None
    config: RingConfig | None = None
    config_sha256: str | None = None
    task: LockedTask = field(default_factory=LockedTask)
    candidates_dir: str | None = None
    baseline_dir: str | None = None
    store: str | None = None
    views: Mapping[str, LockedView] = field(default_factory=dict)
    search_views: tuple[str, ...] = ()
    guard_views: tuple[str, ...] = ()
    guard_view_history: Mapping[str, Any] | None = None
    guard_views_reused: bool = False
    final_view: str | None = None
    evaluation: Mapping[str, Any] = field(default_factory=dict)
    search_hash: str | None = None
    environment: Mapping[str, Any] | None = None
    environment_stamp: Mapping[str, Any] | None = None
    env_key: str | None = None
    program_python: str | None = None
    tree_ignore: tuple[str, ...] = ()
    guard_seeds: tuple[int, ...] = ()
    chain_exposed_seeds: tuple[int, ...] = ()
    continue_from: str | None = None
    sandbox: LockedSandbox = field(default_factory=LockedSandbox)
    program: LockedProgram = field(default_factory=LockedProgram)
    gpu: Any = None
    chain: Mapping[str, Any] | None = None
    alias_salt: str | None = None

    @classmethod
    def from_record(cls, record: Mapping[str, Any], source: str | Path | None = None) -> Ring:
        """A Ring from a RING.json record; `source` names the file in errors."""
        where = str(source) if source is not None else "ring lock"
        if not isinstance(record, Mapping):
            raise InputError(f"{where}: a ring lock file must hold a JSON object")
        missing = [key for key in _REQUIRED if key not in record]
        if missing:
            raise InputError(
                f"{where}: not a ring lock (missing {', '.join(repr(k) for k in missing)})"
            )
        values, extra = split_record(cls, record, _SEQUENCES)
        if record.get("config") is not None:
            values["config"] = RingConfig.from_mapping(record["config"])
        if record.get("task") is not None:
            values["task"] = LockedTask.from_record(record["task"], f"{where}: task")
        for key, typed in (("program", LockedProgram), ("sandbox", LockedSandbox)):
            if record.get(key) is not None:
                values[key] = typed.from_record(record[key], f"{where}: {key}")
        if record.get("views") is not None:
            if not isinstance(record["views"], Mapping):
                raise InputError(f"{where}: views must be a JSON object of views")
            values["views"] = {
                name: LockedView.from_record(view, f"{where}: views.{name}")
                for name, view in record["views"].items()
            }
        return cls(**values, extra=extra, _keys=frozenset(record))

    def to_record(self) -> dict[str, Any]:
        """The RING.json record: equal to the one read (lists stay lists)."""
        return record_of(self)

    @property
    def root(self) -> Path:
        return Path(self.ring_dir)

    @property
    def layout(self) -> RingLayout:
        return RingLayout(Path(self.ring_dir))


# ---- the round trip every typed record shares ----------------------------------------
# A typed record (the lock, its views and task, a node, an execution's result) holds the
# keys it knows as fields, every other key in `extra`, and the keys it was read with in
# `_keys`: written back, it is the record it was read from, key for key, so a file
# rewritten or hashed is unchanged (docs/architecture.md).

_PRIVATE = ("extra", "_keys")


def split_record(cls, record: Mapping[str, Any], sequences: frozenset[str] = frozenset()):
    """(values of `cls`'s fields, the other keys) of `record`; the lists of the fields
    named in `sequences` are held as tuples."""
    names = {f.name for f in dataclasses.fields(cls)} - set(_PRIVATE)
    values = {
        key: tuple(value) if key in sequences and isinstance(value, list) else value
        for key, value in record.items()
        if key in names
    }
    return values, {key: value for key, value in record.items() if key not in names}


def record_of(obj) -> dict[str, Any]:
    """The record a typed record was read from: a field it was not read with is left out
    while it holds its default; tuples are written as lists, typed parts as records."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        if f.name in _PRIVATE:
            continue
        value = getattr(obj, f.name)
        if f.name not in obj._keys and value == field_default(f):
            continue
        out[f.name] = _plain(value)
    out.update(obj.extra)
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, RingConfig):
        return value.to_mapping()
    if isinstance(value, LockedRecord):
        return value.to_record()
    if isinstance(value, Mapping) and any(isinstance(v, LockedRecord) for v in value.values()):
        return {key: _plain(item) for key, item in value.items()}  # the views
    return value


def field_default(f: dataclasses.Field) -> Any:
    """A dataclass field's default value, MISSING where it has none."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING
