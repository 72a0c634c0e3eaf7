"""YAML in, through libyaml where PyYAML has it.

Every Snakemake start (the driver's, and twice inside each cluster job) reads the
configuration schema and the configuration files; the pure-Python loader spends about
40 ms on the schema alone, libyaml about 4 (docs/benchmarks.md). Both give the same
objects: safe types only.
"""

from __future__ import annotations

from typing import IO, Any

import yaml

SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
YAMLError = yaml.YAMLError


def load_yaml(source: str | bytes | IO) -> Any:
    """Like `yaml.safe_load`: one document, plain types."""
    return yaml.load(source, Loader=SafeLoader)


def read_yaml(path) -> Any:
    with open(path, "rb") as handle:
        return load_yaml(handle)
