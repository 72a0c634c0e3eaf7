"""YAML through libyaml (ringflow.core.yamlio): the same objects as PyYAML's safe loader,
and nothing but plain types."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ringflow.core.yamlio import YAMLError, load_yaml, read_yaml

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("name", ["config.schema.yaml", "config.yaml", "quick.yaml", "chain.yaml"])
def test_the_projects_yaml_reads_as_the_safe_loader_reads_it(name):
    path = REPO / "config" / name
    assert read_yaml(path) == yaml.safe_load(path.read_text())


def test_only_plain_types_are_built():
    with pytest.raises(YAMLError):
        load_yaml("!!python/object/apply:os.system ['true']")
    assert load_yaml("a: [1, 2.5, yes, null]") == {"a": [1, 2.5, True, None]}
