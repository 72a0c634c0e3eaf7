"""The configuration: every key has a default and a description, and values given on the
command line arrive with the types the schema asks for."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from ringflow.config import coerce, config_changes, with_changes

REPO = Path(__file__).resolve().parents[3]
SCHEMA = yaml.safe_load((REPO / "config" / "config.schema.yaml").read_text())
DEFAULTS = yaml.safe_load((REPO / "config" / "config.yaml").read_text())


def walk(schema: dict, prefix: str = ""):
    for key, sub in schema.get("properties", {}).items():
        yield f"{prefix}{key}", sub
        yield from walk(sub, f"{prefix}{key}.")


def test_defaults_validate_and_every_key_is_described_and_defaulted():
    jsonschema.validate(DEFAULTS, SCHEMA)
    for name, sub in walk(SCHEMA):
        assert sub.get("description"), f"{name} has no description"
        node = DEFAULTS
        for part in name.split("."):
            assert part in node, f"{name} has no default in config/config.yaml"
            node = node[part]


def test_nested_command_line_values_are_coerced():
    # What Snakemake's --config gives for timeline='{duration_min: 5}' and friends.
    given = {
        **DEFAULTS,
        "timeline": {**DEFAULTS["timeline"], "duration_min": "2.5"},
        "limits": {**DEFAULTS["limits"], "threads": "1"},
        "guard": {**DEFAULTS["guard"], "enabled": "false"},
        "baseline": "null",
        "continue_from": "runs/r1",
        "task": "",
    }
    config = coerce(given, SCHEMA)
    jsonschema.validate(config, SCHEMA)
    assert config["timeline"]["duration_min"] == 2.5
    assert config["limits"]["threads"] == 1
    assert config["guard"]["enabled"] is False
    assert config["baseline"] is None
    assert config["continue_from"] == "runs/r1" and config["task"] == ""


def test_a_wrong_value_still_fails_validation_with_the_key_named():
    config = coerce({**DEFAULTS, "limits": {**DEFAULTS["limits"], "threads": "many"}}, SCHEMA)
    with pytest.raises(jsonschema.ValidationError, match="many"):
        jsonschema.validate(config, SCHEMA)


def test_a_configuration_travels_as_its_changes_to_the_defaults():
    """The lock's rule hands its step the ring's configuration as changes to the defaults
    (a short command line, shown whole when the step fails); they give it back exactly."""
    config = copy.deepcopy(DEFAULTS)
    config.update(ring_id="r1", runs_dir="/tmp/a b/runs", limits_per_view={"x3": {"threads": 2}})
    config["guard"]["seeds"] = 9
    del config["rings"]  # a ring's own configuration has no chain
    changes = config_changes(config, DEFAULTS)
    assert [["guard", "seeds"], 9] in changes
    assert [["limits_per_view", "x3"], {"threads": 2}] in changes
    assert [["rings"]] in changes
    assert len(json.dumps(changes)) < len(json.dumps(config)) / 4
    assert with_changes(DEFAULTS, json.loads(json.dumps(changes))) == config
    assert config_changes(DEFAULTS, DEFAULTS) == []
    # A key inside a mapping dropped, one added.
    config["views"] = {"search": ["proxy"], "extra": 1}
    changes = config_changes(config, DEFAULTS)
    assert with_changes(DEFAULTS, json.loads(json.dumps(changes))) == config
    assert "rings" in DEFAULTS and DEFAULTS["guard"]["seeds"] != 9  # defaults untouched
