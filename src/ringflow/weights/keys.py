"""Weights keys: the content hash that names one trained state (SPEC 6).

A key is the sha256 of the canonical JSON of exactly the inputs that decide
what training produces; two executions with the same key may share weights.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import sys
from typing import Any

from ..errors import InputError
from ..jsonio import canonical_json, sha256_json

SHA256_PATTERN = re.compile(r"[0-9a-f]{64}")

# What each component means, in the order `explain` prints them.
COMPONENT_MEANINGS = {
    "tree_hash": "solution tree (without per-view files, progress.json, caches)",
    "train_seed": "training seed",
    "view_hash": "view content (inputs/ and labels/)",
    "env_key": "environment (python, installed packages, threads, variables)",
    "train_args": "extra arguments that affect training",
}


def installed_packages() -> list[str]:
    """Sorted "name==version" lines of every installed distribution (what `pip freeze` lists).

    Read from the names of the `*.dist-info` / `*.egg-info` folders on sys.path, which hold
    both: every execution checks the environment, and parsing each distribution's
    METADATA file costs a tenth of a second on a loaded machine.
    """
    lines = set()
    # Only package folders: sys.path[0] is the script's folder or the working directory.
    for entry in sys.path:
        if not entry.endswith(("site-packages", "dist-packages")):
            continue
        try:
            names = os.listdir(entry)
        except OSError:
            continue
        for name in names:
            stem, dot, suffix = name.rpartition(".")
            if dot and suffix in ("dist-info", "egg-info") and "-" in stem:
                package, _, version = stem.partition("-")
                lines.add(f"{package.replace('_', '-').lower()}=={version.split('-')[0]}")
    return sorted(lines)


def environment(threads: int, extra_vars: dict[str, str] | None = None) -> dict[str, Any]:
    """The environment facts that change what a training program computes."""
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise InputError(f"environment: threads must be a positive integer, got {threads!r}")
    extra_vars = dict(extra_vars or {})
    for name, value in extra_vars.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise InputError(
                f"environment: variable {name!r} must map a name to a string, got {value!r}"
            )
    packages = "\n".join(installed_packages()).encode()
    return {
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.machine(),
        "packages_sha256": hashlib.sha256(packages).hexdigest(),
        "threads": threads,
        "vars": extra_vars,
    }


def environment_key(env: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of an environment dict."""
    return sha256_json(env)


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
) -> tuple[str, dict[str, Any]]:
    """The weights key and the components it was computed from."""
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
    return sha256_json(components), components


def explain(key: str, components: dict[str, Any]) -> str:
    """One line per component of a key, for `ringflow key --explain`."""
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
    return "\n".join(lines)
