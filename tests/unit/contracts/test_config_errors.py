"""Config errors name the key and the nearest valid name, never the schema (issue: a typo
printed one useful line, then ~490 lines of schema)."""

from __future__ import annotations

import pytest
import yaml

from ringflow.config import check_config, config_problems
from ringflow.core.errors import InputError
from ringtools import DEFAULTS, REPO

SCHEMA_PATH = REPO / "config" / "config.schema.yaml"
SCHEMA = yaml.safe_load(SCHEMA_PATH.read_text())


def test_the_defaults_have_no_problem():
    assert config_problems(DEFAULTS, SCHEMA) == []


def test_a_typo_names_the_nearest_key_at_any_depth():
    config = {**DEFAULTS, "final_topk": 2,
              "timeline": {**DEFAULTS["timeline"], "duraton_min": 5}}  # fmt: skip
    assert config_problems(config, SCHEMA) == [
        "unknown key 'final_topk' (did you mean 'final_top_k'?)",
        "unknown key 'timeline.duraton_min' (did you mean 'duration_min'?)",
    ]


def test_a_bad_value_names_its_key_and_a_far_name_lists_the_valid_ones():
    config = {**DEFAULTS, "guard": {**DEFAULTS["guard"], "alpha": "often", "zzz": 1}}
    problems = config_problems(config, SCHEMA)
    assert "guard.alpha = 'often': 'often' is not of type 'number'" in problems
    known = "unknown key 'guard.zzz' (valid keys: against, alpha, bootstrap, enabled"
    assert any(p.startswith(known) for p in problems)


def test_check_config_raises_one_short_message():
    with pytest.raises(InputError) as error:
        check_config({**DEFAULTS, "ring_idd": "x"}, str(SCHEMA_PATH))
    text = str(error.value)
    assert "unknown key 'ring_idd' (did you mean 'ring_id'?)" in text
    assert len(text.splitlines()) <= 3 and "properties" not in text
