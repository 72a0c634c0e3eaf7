"""The ring's configuration as typed, frozen settings, one dataclass per section.

Mirrors `config/config.schema.yaml` key for key (a test holds the two together): every
object of the schema is a dataclass here, its arrays are tuples, and its free-form objects
(`rings`, `limits_per_view`) stay read-only mappings. Nothing here has a default: the
defaults are `config/config.yaml`'s, laid under every Snakemake run, and the schema checks
the values before they are read here.

`RingConfig.from_mapping` builds the tree from the validated configuration (a missing or
unknown key is refused with its dotted path); `to_mapping()` gives back exactly the mapping
it was built from, lists as lists, so the lock's `config` and `config_sha256` do not change.
Keys the schema does not require (`rings`, `view_blind`, `notify`, `slurm`, `guard.retrain`,
`guard.against`, `sandbox.host_uids`, `view_blind.*`) may be absent: their field is None
and `to_mapping()` leaves them out again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import field
from types import MappingProxyType
from typing import Any, ClassVar, TypeVar

from .errors import InputError
from .frozen import Frozen, frozen_record

S = TypeVar("S", bound="Section")


def _freeze(value: Any) -> Any:
    """A read-only copy: mappings as mapping proxies, lists as tuples."""
    if isinstance(value, Mapping):
        return MappingProxyType({key: _freeze(item) for key, item in value.items()})
    if isinstance(value, list | tuple):
        return tuple(_freeze(item) for item in value)
    return value


def _thaw(value: Any) -> Any:
    """The plain JSON value of a frozen one: dicts and lists."""
    if isinstance(value, Section):
        return value.to_mapping()
    if isinstance(value, Mapping):
        return {key: _thaw(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return [_thaw(item) for item in value]
    return value


class Section(Frozen):
    """One object of the schema. Subclasses are frozen records (core/frozen.py);
    `_SECTIONS` names the keys that are sections themselves (every other mapping is
    free-form) and `_OPTIONAL` the keys the schema does not require."""

    _SECTIONS: ClassVar[Mapping[str, type[Section]]] = {}
    _OPTIONAL: ClassVar[frozenset[str]] = frozenset()
    # Keys that are no Python name, by their field's name (email's `from` is `from_`).
    _KEYS: ClassVar[Mapping[str, str]] = {}

    @classmethod
    def pairs(cls) -> tuple[tuple[str, str], ...]:
        """(field name, configuration key) of this section, in the schema's order."""
        return tuple(
            (f.name, cls._KEYS.get(f.name, f.name))
            for f in dataclasses.fields(cls)
            if not f.name.startswith("_")
        )

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        """The configuration keys of this section, in the schema's order."""
        return tuple(key for _name, key in cls.pairs())

    @classmethod
    def from_mapping(cls: type[S], d: Any, path: str = "") -> S:
        """The section from its validated mapping; InputError names a missing or unknown
        key, or a section that is not a mapping, by its dotted path."""
        if not isinstance(d, Mapping):
            where = path or "the configuration"
            raise InputError(f"config: {where} must be a mapping, got {type(d).__name__}")
        unknown = sorted(str(key) for key in set(d) - set(cls.keys()))
        if unknown:
            raise InputError(f"config: {_dotted(path, unknown[0])} is not a known key")
        values: dict[str, Any] = {}
        for name, key in cls.pairs():
            if key not in d:
                if key not in cls._OPTIONAL:
                    raise InputError(f"config: {_dotted(path, key)} is missing")
                values[name] = None
                continue
            section = cls._SECTIONS.get(key)
            if section is not None:
                values[name] = section.from_mapping(d[key], _dotted(path, key))
            else:
                values[name] = _freeze(d[key])
        if any(f.name == "_given" for f in dataclasses.fields(cls)):
            values["_given"] = frozenset(k for k in cls._OPTIONAL if k in d)
        return cls(**values)

    def to_mapping(self) -> dict[str, Any]:
        """The mapping this was built from: the same keys, lists as lists."""
        given = getattr(self, "_given", frozenset())
        out: dict[str, Any] = {}
        for name, key in self.pairs():
            value = getattr(self, name)
            if key in self._OPTIONAL and value is None and key not in given:
                continue
            out[key] = _thaw(value)
        return out


def _dotted(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


@frozen_record
class Views(Section):
    search: tuple[str, ...]
    guard: tuple[str, ...] | None
    final: str | None


@frozen_record
class Timeline(Section):
    duration_min: float
    final_reserve_min: float
    node_tail_min: float
    settle_extra_s: float
    stop_margin_s: float
    reserve_pad_min: float


@frozen_record
class ExecHealth(Section):
    enforce: bool
    collect_s: float
    interval_s: float
    hang_min: float
    term_grace_s: float
    failed_after_s: float
    min_cpu_frac: float
    min_io_kbps: float


@frozen_record
class Limits(Section):
    memory_gb: float
    time_limit_min: float
    threads: int
    output_gb: float
    output_files: int
    log_mb: float
    max_processes: int


@frozen_record
class Guard(Section):
    _OPTIONAL: ClassVar[frozenset[str]] = frozenset({"retrain", "against"})

    enabled: bool
    seeds: int
    alpha: float
    margin: float
    bootstrap: int
    retrain: bool | None
    against: str | None


@frozen_record
class ViewBlind(Section):
    _OPTIONAL: ClassVar[frozenset[str]] = frozenset({"extra_runs", "max_extra_train_min"})

    extra_runs: int | None
    max_extra_train_min: float | None


@frozen_record
class Reserve(Section):
    review_command_min: float


@frozen_record
class Program(Section):
    python: str | None


@frozen_record
class HostUids(Section):
    first: int
    count: int


@frozen_record
class Sandbox(Section):
    _SECTIONS: ClassVar[Mapping[str, type[Section]]] = {"host_uids": HostUids}
    _OPTIONAL: ClassVar[frozenset[str]] = frozenset({"host_uids"})

    mode: str
    uid: int
    gid: int
    host_uids: HostUids | None
    mounts: tuple[str, ...]
    network: bool
    env_pass: tuple[str, ...]
    tmp_mb: int


@frozen_record
class Evaluator(Section):
    memory_gb: float
    max_processes: int


@frozen_record
class EngineerLimits(Section):
    file_mb: float
    workspace_gb: float
    workspace_files: int


@frozen_record
class Engineer(Section):
    _SECTIONS: ClassVar[Mapping[str, type[Section]]] = {"limits": EngineerLimits}

    command: str | None
    builtin_delay_s: float
    network: bool
    env_pass: tuple[str, ...]
    mounts: tuple[str, ...]
    stall_min: float
    template: str | None
    limits: EngineerLimits


@frozen_record
class Search(Section):
    max_nodes: int
    max_concurrent_nodes: int
    draft_fraction: float
    feedback: str
    queries_per_node: int
    background_eval_min: float


@frozen_record
class Terminal(Section):
    progress_s: float
    snakemake_log: bool


@frozen_record
class Email(Section):
    _KEYS: ClassVar[Mapping[str, str]] = {"from_": "from"}

    to: str | tuple[str, ...]
    from_: str  # the key `from` (a Python keyword)
    smtp_host: str
    smtp_port: int
    starttls: bool
    username: str | None
    password_env: str | None


@frozen_record
class Webhook(Section):
    url: str | None
    url_env: str | None
    token_env: str | None


@frozen_record
class Notify(Section):
    _SECTIONS: ClassVar[Mapping[str, type[Section]]] = {"email": Email, "webhook": Webhook}

    digest_every_h: float
    poll_s: float
    email: Email
    webhook: Webhook


@frozen_record
class Slurm(Section):
    _OPTIONAL: ClassVar[frozenset[str]] = frozenset({"status_poll_max_s"})

    pending_warn_min: float
    status_poll_max_s: float | None  # rings locked before it existed: the default


@frozen_record
class RingConfig(Section):
    """The whole configuration of one ring (RING.json's `config`)."""

    _SECTIONS: ClassVar[Mapping[str, type[Section]]] = {
        "views": Views,
        "timeline": Timeline,
        "exec_health": ExecHealth,
        "limits": Limits,
        "guard": Guard,
        "view_blind": ViewBlind,
        "reserve": Reserve,
        "program": Program,
        "sandbox": Sandbox,
        "evaluator": Evaluator,
        "engineer": Engineer,
        "search": Search,
        "terminal": Terminal,
        "slurm": Slurm,
        "notify": Notify,
    }
    _OPTIONAL: ClassVar[frozenset[str]] = frozenset({"rings", "view_blind", "notify", "slurm"})

    ring_id: str
    runs_dir: str
    store: str
    task: str
    candidates: str
    baseline: str | None
    continue_from: str | None
    rings: Mapping[str, Any] | None
    resources_dir: str
    views: Views
    timeline: Timeline
    exec_health: ExecHealth
    limits: Limits
    limits_per_view: Mapping[str, Mapping[str, Any]]
    promote_top_k: int
    final_top_k: int
    guard: Guard
    review: str | None
    view_blind: ViewBlind | None
    reserve: Reserve
    replay_verify: str
    max_weights_gb: float
    max_train_attempts: int
    max_resume_per_ring: int
    continue_rescore_top_k: int
    max_file_mb: float
    tree_ignore: tuple[str, ...]
    scorer_timeout_min: float
    program: Program
    sandbox: Sandbox
    evaluator: Evaluator
    gpus_per_execution: int
    scorer_fail_stop: int
    engineer: Engineer
    search: Search
    terminal: Terminal
    slurm: Slurm | None
    notify: Notify | None
    # The keys the schema does not require that the mapping held (`rings: null` is given,
    # not absent): bookkeeping for to_mapping(), no configuration.
    _given: frozenset[str] = field(default=frozenset(), repr=False, compare=False)
