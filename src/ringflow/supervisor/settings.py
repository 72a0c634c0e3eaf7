"""Health and resource settings of one execution (docs/operations.md#health-supervision), read from
the config."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ..core.errors import InputError
from ..core.frozen import Frozen, frozen_record
from ..core.settings import ExecHealth, Limits


def _number(section: str, key: str, value: Any, *, allow_none: bool, allow_zero: bool) -> Any:
    if value is None:
        if allow_none:
            return None
        raise InputError(f"{section}.{key}: must be a number, got null")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"{section}.{key}: must be a number, got {type(value).__name__} {value!r}")
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise InputError(f"{section}.{key}: must be finite and {bound}, got {value!r}")
    return value


def _check_keys(section: str, cls: type, d: Any) -> dict:
    if d is None:
        return {}
    if not isinstance(d, dict):
        raise InputError(f"{section}: must be a mapping, got {type(d).__name__}")
    known = {f.name for f in dataclasses.fields(cls) if f.metadata.get("config", True)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise InputError(f"{section}: unknown key(s) {unknown}; known keys are {sorted(known)}")
    return d


@frozen_record
class HealthSettings(Frozen):
    """`exec_health` of the config: how often to look, when to call a program hung."""

    enforce: bool = False
    collect_s: float = 60
    interval_s: float = 300
    hang_min: float = 30
    term_grace_s: float = 60
    failed_after_s: float = 600
    min_cpu_frac: float = 0.01
    min_io_kbps: float = 64

    @classmethod
    def from_config(cls, section: ExecHealth) -> HealthSettings:
        """Build from the configuration's `exec_health` section."""
        return cls.from_mapping(section.to_mapping())

    @classmethod
    def from_mapping(cls, d: dict) -> HealthSettings:
        """Build from an `exec_health` mapping; missing keys keep their defaults."""
        d = _check_keys("exec_health", cls, d)
        values: dict[str, Any] = {}
        for key, value in d.items():
            if key == "enforce":
                if not isinstance(value, bool):
                    raise InputError(f"exec_health.enforce: must be true or false, got {value!r}")
                values[key] = value
            else:
                zero_ok = key in ("term_grace_s", "min_cpu_frac", "min_io_kbps")
                values[key] = _number(
                    "exec_health", key, value, allow_none=False, allow_zero=zero_ok
                )
        return cls(**values)


@frozen_record
class ResourceLimits(Frozen):
    """`limits` of a board or view: memory, wall-clock backstop, threads
    (docs/operations.md#health-supervision)."""

    memory_gb: float | None = 28
    time_limit_min: float | None = 360
    threads: int | None = 8
    output_gb: float | None = None  # output and writable folders together
    output_files: int | None = None  # files and folders there, counted alike
    log_mb: float | None = None  # each of stdout.log and stderr.log; the rest is dropped
    max_processes: int | None = None  # processes and threads of the tree
    # The configuration keys the output limits came from, for the reason a stop gives (an
    # engineer session's workspace limits are engineer.limits.workspace_gb and _files).
    output_names: tuple[str, str] = dataclasses.field(
        default=("limits.output_gb", "limits.output_files"), metadata={"config": False}
    )
    # The key and value the largest file a program may write (RLIMIT_FSIZE) came from,
    # where not the output limit (an engineer session's is engineer.limits.file_mb).
    largest_file: str | None = dataclasses.field(default=None, metadata={"config": False})

    @classmethod
    def from_config(cls, section: Limits) -> ResourceLimits:
        """Build from the configuration's `limits` section."""
        return cls.from_mapping(section.to_mapping())

    @classmethod
    def from_mapping(cls, d: dict) -> ResourceLimits:
        """Build from a `limits` mapping (a view's limits as locked); null means "no
        limit"."""
        d = _check_keys("limits", cls, d)
        values: dict[str, Any] = {}
        for key, value in d.items():
            if key in ("threads", "max_processes", "output_files"):
                if value is not None and (
                    isinstance(value, bool) or not isinstance(value, int) or value < 1
                ):
                    raise InputError(f"limits.{key}: must be an integer >= 1, got {value!r}")
                values[key] = value
            else:
                values[key] = _number("limits", key, value, allow_none=True, allow_zero=False)
        return cls(**values)
