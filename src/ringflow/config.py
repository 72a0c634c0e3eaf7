"""Configuration values as typed by the schema.

Snakemake parses nested `--config key='{a: 1}'` values with YAML's BaseLoader, so every
nested scalar arrives as a string, and `key=null` arrives as the string "null". Values
are coerced here, guided by the schema, before the schema validates them.
"""

from __future__ import annotations

from typing import Any

import yaml

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
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:
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
        schema = yaml.safe_load(handle)
    config.update(coerce(dict(config), schema))
