"""Configuration values as typed by the schema.

Snakemake parses nested `--config key='{a: 1}'` values with YAML's BaseLoader, so every
nested scalar arrives as a string, and `key=null` arrives as the string "null". Values
are coerced here, guided by the schema, before the schema validates them.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from .core.yamlio import YAMLError, load_yaml

SCALARS = {"integer", "number", "boolean", "null"}


def _types(schema: dict) -> set[str]:
    kind = schema.get("type", [])
    return {kind} if isinstance(kind, str) else set(kind)


def coerce(value: Any, schema: dict) -> Any:
    types = _types(schema)
    if isinstance(value, dict) and "properties" in schema:
        props = schema["properties"]
        return {k: coerce(v, props[k]) if k in props else v for k, v in value.items()}
    if isinstance(value, dict) and isinstance(schema.get("additionalProperties"), dict):
        # A mapping of named entries (limits_per_view): each value has the same schema.
        return {k: coerce(v, schema["additionalProperties"]) for k, v in value.items()}
    if isinstance(value, list) and "items" in schema:
        return [coerce(v, schema["items"]) for v in value]
    if isinstance(value, str) and "string" in types:
        # A string is valid as it is; only YAML's null spelling means "no value".
        return None if value in ("null", "~") and "null" in types else value
    if isinstance(value, str) and types & SCALARS:
        try:
            parsed = load_yaml(value)
        except YAMLError:
            return value
        if parsed is None and "null" in types:
            return None
        if isinstance(parsed, bool) and "boolean" in types:
            return parsed
        if (
            isinstance(parsed, int)
            and not isinstance(parsed, bool)
            and types & {"integer", "number"}
        ):
            return parsed
        if isinstance(parsed, float) and "number" in types:
            return parsed
    return value


def coerce_config(config: dict, schema_path: str) -> None:
    """Coerce a Snakemake config in place."""
    with open(schema_path) as handle:
        schema = load_yaml(handle)
    config.update(coerce(dict(config), schema))


def _path(error) -> str:
    return ".".join(str(p) for p in error.absolute_path)


def _nearest(name: str, valid: list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name, valid, n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else f" (valid keys: {', '.join(valid)})"


def config_problems(config: dict, schema: dict) -> list[str]:
    """Every schema violation as one line naming the key, and for an unknown key the
    nearest valid name; never the schema itself."""
    import jsonschema

    problems = []
    validator = jsonschema.Draft202012Validator(schema)
    for error in sorted(validator.iter_errors(config), key=lambda e: list(e.absolute_path)):
        where = _path(error)
        if error.validator == "additionalProperties":
            sub = schema
            for part in error.absolute_path:
                sub = sub.get("properties", {}).get(part, {})
            valid = sorted(sub.get("properties", {}))
            extra = sorted(set(error.instance) - set(valid))
            for name in extra:
                key = f"{where}.{name}" if where else name
                problems.append(f"unknown key {key!r}{_nearest(name, valid)}")
        elif error.validator == "required":
            problems.append(f"{where or 'config'}: {error.message}")
        else:
            value = error.instance
            shown = repr(value) if not isinstance(value, dict | list) else type(value).__name__
            problems.append(f"{where or 'config'} = {shown}: {error.message.split(chr(10))[0]}")
    return problems or guard_problems(config)


def guard_problems(config: dict) -> list[str]:
    """Keys that are valid one by one but not together: a guard.bootstrap too small for
    any alpha/final_top_k quantile could never bound a difference (docs/guard.md#scorer-modes)."""
    guard = config.get("guard")
    top_k = config.get("final_top_k")
    if not isinstance(guard, dict) or not isinstance(top_k, int) or top_k < 1:
        return []
    alpha, count = guard.get("alpha"), guard.get("bootstrap")
    if not isinstance(alpha, int | float) or not 0 < alpha < 1 or not isinstance(count, int):
        return []
    from .guardstats import min_bootstrap

    needed = min_bootstrap(top_k, alpha)
    if count >= needed:
        return []
    return [
        f"guard.bootstrap = {count}: too few resamples for the guard's quantile alpha / "
        f"final_top_k = {alpha:g} / {top_k}, so no bound could ever be computed; use at "
        f"least {needed} (ceil(final_top_k / alpha)), or lower final_top_k"
    ]


def check_config(config: dict, schema_path: str) -> None:
    """Raise InputError listing each bad key (one line each) when the config is invalid."""
    from .core.errors import InputError

    with open(schema_path) as handle:
        schema = load_yaml(handle)
    problems = config_problems(config, schema)
    if problems:
        raise InputError(
            "invalid configuration:\n  "
            + "\n  ".join(problems)
            + "\n(every key with its default and meaning: config/config.yaml and "
            "config/config.schema.yaml)"
        )


def config_defaults(path: str) -> dict:
    """The defaults of every key (config/config.yaml)."""
    with open(path) as handle:
        return load_yaml(handle)


def config_changes(config: dict, defaults: dict) -> list[list]:
    """[[path, value], …] that make `defaults` into `config` (with_changes): each value that
    differs, descending into mappings both hold, and `[path]` for a default key `config`
    has not (a ring's configuration has no `rings`: that is its chain's); `[[], config]`
    where nothing shorter gives it back. How a rule hands a step the ring's configuration
    on its command line, which Snakemake shows whole when the step fails."""

    def walk(value: dict, default: dict, at: tuple) -> list[list]:
        changes: list[list] = []
        for key, item in value.items():
            known = default.get(key)
            if isinstance(item, dict) and isinstance(known, dict):
                changes += walk(item, known, (*at, key))
            elif key not in default or item != known:
                changes.append([[*at, key], item])
        changes += [[[*at, key]] for key in default if key not in value]
        return changes

    changes = walk(config, defaults, ())
    if _as_json(with_changes(defaults, changes)) != _as_json(config):
        return [[[], config]]  # a value JSON does not carry as it is
    return changes


def with_changes(defaults: dict, changes: list[list]) -> dict:
    """The configuration `config_changes` described, over these defaults."""
    config = copy.deepcopy(defaults)
    for change in changes:
        path = change[0]
        if not path:
            config = copy.deepcopy(change[1])
            continue
        target = config
        for key in path[:-1]:
            target = target[key]
        if len(change) == 1:
            target.pop(path[-1], None)
        else:
            target[path[-1]] = copy.deepcopy(change[1])
    return config


def _as_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True)
