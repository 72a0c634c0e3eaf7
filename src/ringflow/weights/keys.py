"""Weights keys: the content hash that names one trained state (docs/contracts.md#weights).

A key is the sha256 of the canonical JSON of exactly the inputs that decide
what training produces; two executions with the same key may share weights.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

from ..core.errors import InputError, RingflowError
from ..core.hashing import sha256_file
from ..core.jsonio import canonical_json, sha256_json
from ..core.settings import Program, RingConfig
from ..core.state import Ring

SHA256_PATTERN = re.compile(r"[0-9a-f]{64}")
REPO = Path(__file__).resolve().parents[3]

# What each component means, in the order `explain` prints them.
COMPONENT_MEANINGS = {
    "tree_hash": "solution tree (without per-view files, progress.json, caches)",
    "train_seed": "training seed",
    "view_hash": "the view's inputs/ (labels are not part of it)",
    "env_key": "environment (program.python's packages, mounts, variables, threads, GPUs)",
    "train_args": "extra arguments that affect training",
    "interpreter": "the command's interpreter when it is not program.python (by content)",
}
PYTHON_COMMANDS = ("python", "python3")


def program_python(program: Program, repo: Path | None = None) -> Path:
    """The candidates' interpreter: `program.python`, or the repository's .venv-program.

    A relative path is taken from the repository root, like the default.
    """
    repo = REPO if repo is None else repo
    named = program.python
    if not named:
        return repo / ".venv-program" / "bin" / "python"
    path = Path(named).expanduser()
    return path if path.is_absolute() else repo / path


def ring_program_python(ring: Ring) -> Path:
    """The interpreter a locked ring's programs run with (resolved at lock time)."""
    if ring.program_python:
        return Path(ring.program_python)
    return program_python(ring.config.program)


def environment_for(config: RingConfig, memo=None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(components, stamp) of the candidates' environment under a ring's configuration."""
    from .environment import describe

    return describe(
        program_python(config.program),
        config.limits.threads,
        list(config.sandbox.mounts),
        memo,
        config.sandbox.env_pass,
    )


def command_interpreter(command: list[str], path: str | None = None) -> dict | None:
    """What runs a command that is neither `python` (program.python, in the environment key)
    nor a file of the solution (in the tree hash): its resolved path and content hash."""
    first = command[0]
    if first in PYTHON_COMMANDS or ("/" in first and not first.startswith("/")):
        return None
    resolved = first if first.startswith("/") else shutil.which(first, path=path)
    if resolved is None or not os.path.isfile(resolved):
        return {"command": first, "path": None, "sha256": None}
    real = os.path.realpath(resolved)
    return {"command": first, "path": real, "sha256": sha256_file(real)}


def check_environment(ring: Ring, memo=None) -> None:
    """Refuse a job whose environment differs from the one frozen in RING.json.

    Cheap when nothing moved (a stat per package folder, memoised hashes of the mounts);
    the interpreter is probed again only when its folders changed.
    """
    from .environment import (
        differences,
        environment_key,
        job_variables,
        rehash_sources,
        stamp_matches,
    )

    frozen = ring.environment
    stamp = ring.environment_stamp
    python = ring_program_python(ring)
    if stamp is not None and stamp_matches(stamp, python):
        current = rehash_sources(frozen, stamp, memo)
        current["threads"] = ring.config.limits.threads
    else:
        current, _ = environment_for(ring.config, memo)
    current["variables"] = job_variables(
        frozen.get("variables") or {}, python, ring.config.sandbox.env_pass
    )
    if environment_key(current) != ring.env_key:
        raise RingflowError(
            f"this job's environment differs from the one frozen in {ring.ring_dir}/RING.json "
            f"(in: {'; '.join(differences(frozen, current)) or 'env_key'}); weights keys would "
            "not match, "
            "so it refuses to run"
        )


def _require_sha256(name: str, value: Any) -> None:
    if not isinstance(value, str) or not SHA256_PATTERN.fullmatch(value):
        raise InputError(f"weights key: {name} must be a sha256 hex digest, got {value!r}")


def weights_key(
    *,
    tree_hash: str,
    train_seed: int,
    view_hash: str,
    env_key: str,
    train_args: list[str],
    interpreter: dict | None = None,
) -> tuple[str, dict[str, Any]]:
    """The weights key and the components it was computed from (`interpreter` only when the
    command does not run with program.python)."""
    _require_sha256("tree_hash", tree_hash)
    _require_sha256("view_hash", view_hash)
    _require_sha256("env_key", env_key)
    if isinstance(train_seed, bool) or not isinstance(train_seed, int):
        raise InputError(f"weights key: train_seed must be an integer, got {train_seed!r}")
    if not isinstance(train_args, list | tuple) or not all(isinstance(a, str) for a in train_args):
        raise InputError(f"weights key: train_args must be a list of strings, got {train_args!r}")
    components = {
        "tree_hash": tree_hash,
        "train_seed": train_seed,
        "view_hash": view_hash,
        "env_key": env_key,
        "train_args": list(train_args),
    }
    if interpreter is not None:
        components["interpreter"] = interpreter
    return sha256_json(components), components


def key_for_gpus(
    key: str, components: dict[str, Any], environment: dict[str, Any], gpus: list[dict]
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(key, components, environment) of an execution given `gpus` (unchanged without GPUs).

    The GPUs' model, driver and CUDA version enter the environment, so each GPU model has
    keys of its own: a mixed partition gives different keys, never a refused job.
    """
    if not gpus:
        return key, components, environment
    env = {**environment, "gpu": gpus}
    new_key, new_components = weights_key(**{**components, "env_key": sha256_json(env)})
    return new_key, new_components, env


def spec_given_gpus(ring: Ring, spec: dict, env: dict | None = None) -> dict:
    """An execution's spec with its key for the GPUs it is given (unchanged without).

    The GPUs are those `CUDA_VISIBLE_DEVICES` names in `env` (the job's environment when
    None): pass the environment the program gets when GPUs are assigned to it there.
    """
    if not spec.get("key"):
        return spec
    from .environment import gpu_component

    gpus = gpu_component(env)
    if not gpus:
        return spec
    key, components, env = key_for_gpus(spec["key"], spec["key_components"],
                                        ring.environment, gpus)  # fmt: skip
    return {**spec, "key": key, "key_components": components, "base_key": spec["key"],
            "environment": env}  # fmt: skip


def explain(key: str, components: dict[str, Any], environment: dict | None = None) -> str:
    """One line per component of a key, for `ringflow key --explain`; with the frozen
    environment, one line per environment component under env_key."""
    recomputed = sha256_json(components)
    status = "matches its components" if recomputed == key else f"MISMATCH: recomputed {recomputed}"
    lines = [f"weights key {key} ({status})"]
    names = [n for n in COMPONENT_MEANINGS if n in components]
    names += sorted(n for n in components if n not in COMPONENT_MEANINGS)
    width = max((len(n) for n in names), default=0)
    for name in names:
        value = canonical_json(components[name]).decode()
        meaning = COMPONENT_MEANINGS.get(name, "")
        suffix = f"  # {meaning}" if meaning else ""
        lines.append(f"  {name.ljust(width)}  {value}{suffix}")
    if environment is not None:
        env_ok = sha256_json(environment) == components.get("env_key")
        lines.append(
            "  environment components"
            + ("" if env_ok else " (MISMATCH: they do not hash to env_key)")
            + ":"
        )
        env_width = max((len(n) for n in environment), default=0)
        for name in sorted(environment):
            lines.append(f"    {name.ljust(env_width)}  {_env_value(environment[name])}")
    return "\n".join(lines)


def _env_value(value: Any) -> str:
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return f"{len(value)}: " + ", ".join(value)
    return canonical_json(value).decode()
