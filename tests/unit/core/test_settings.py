"""The typed configuration: mirrors the schema key for key, and gives back the mapping it
was built from."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest
import yaml

from ringflow.core import settings
from ringflow.core.errors import InputError
from ringflow.core.jsonio import sha256_json
from ringflow.core.settings import RingConfig, Section
from ringflow.ring.lock import lock_ring
from ringtools import DEFAULTS, FAST, REPO, merged, scripted_config

SCHEMA = yaml.safe_load((REPO / "config" / "config.schema.yaml").read_text())


def _sections(cls: type[Section], schema: dict, path: str = ""):
    """(dotted path, dataclass, schema object) of every object of the schema with
    properties, walked from the root along the dataclass tree."""
    yield path, cls, schema
    for key, section in cls._SECTIONS.items():
        yield from _sections(section, schema["properties"][key], f"{path}.{key}".lstrip("."))


def test_every_section_mirrors_the_schema():
    seen = set()
    for path, cls, schema in _sections(RingConfig, SCHEMA):
        seen.add(path)
        assert list(cls.keys()) == list(schema["properties"]), path or "root"
        required = set(schema.get("required", []))
        assert set(cls.keys()) - required == set(cls._OPTIONAL), path or "root"
    # Every object of the schema that has properties is a section here.
    objects = {key for key, value in SCHEMA["properties"].items() if "properties" in value}
    assert objects == {path for path in seen if path and "." not in path}
    assert "sandbox.host_uids" in seen and "engineer.limits" in seen
    assert {"notify.email", "notify.webhook"} <= seen
    # Every section class of the module is reached from RingConfig.
    classes = {cls for _, cls, _ in _sections(RingConfig, SCHEMA)}
    defined = {
        value
        for value in vars(settings).values()
        if isinstance(value, type) and issubclass(value, Section) and value is not Section
    }
    assert classes == defined


def test_no_field_has_a_default():
    for _, cls, _ in _sections(RingConfig, SCHEMA):
        for f in dataclasses.fields(cls):
            if f.name.startswith("_"):
                continue
            assert f.default is dataclasses.MISSING, f"{cls.__name__}.{f.name}"
            assert f.default_factory is dataclasses.MISSING, f"{cls.__name__}.{f.name}"


def test_defaults_with_quick_settings_round_trip_exactly():
    config = merged(DEFAULTS, FAST)
    typed = RingConfig.from_mapping(config)
    assert typed.to_mapping() == config
    assert sha256_json(typed.to_mapping()) == sha256_json(config)
    assert typed.timeline.stop_margin_s == FAST["timeline"]["stop_margin_s"]
    assert typed.notify.email.from_ == DEFAULTS["notify"]["email"]["from"]
    assert typed.sandbox.host_uids.count == DEFAULTS["sandbox"]["host_uids"]["count"]
    assert isinstance(typed.tree_ignore, tuple) and isinstance(typed.views.search, tuple)
    assert isinstance(typed.to_mapping()["tree_ignore"], list)
    assert isinstance(typed.to_mapping()["notify"]["email"]["to"], list)


def test_a_real_lock_round_trips_exactly(tmp_path):
    config = scripted_config(
        tmp_path, "typed", limits_per_view={"final": {"memory_gb": 2}}, tree_ignore=["*.md"]
    )
    ring = lock_ring(config, tmp_path, now=0.0)
    record = json.loads(ring.layout.ring_json.read_text())
    typed = RingConfig.from_mapping(record["config"])
    assert typed.to_mapping() == record["config"]
    assert ring.config == typed
    assert ring.to_record() == record
    assert typed.limits_per_view["final"]["memory_gb"] == 2
    assert typed.tree_ignore == ("*.md",)


def test_keys_the_schema_does_not_require_may_be_absent_and_stay_so():
    config = merged(DEFAULTS, FAST)
    for key in ("rings", "view_blind", "notify"):
        config.pop(key)
    del config["guard"]["retrain"], config["guard"]["against"], config["sandbox"]["host_uids"]
    typed = RingConfig.from_mapping(config)
    assert typed.rings is None and typed.view_blind is None and typed.notify is None
    assert typed.guard.retrain is None and typed.sandbox.host_uids is None
    assert typed.to_mapping() == config
    # A null that is given stays given.
    assert RingConfig.from_mapping({**config, "rings": None}).to_mapping() == {
        **config,
        "rings": None,
    }


@pytest.mark.parametrize(
    ("path", "message"),
    [
        (("timeline", "stop_margin_s"), "config: timeline.stop_margin_s is missing"),
        (("ring_id",), "config: ring_id is missing"),
        (("notify", "email", "from"), "config: notify.email.from is missing"),
        (("engineer", "limits", "file_mb"), "config: engineer.limits.file_mb is missing"),
    ],
)
def test_a_missing_key_is_refused_with_its_path(path, message):
    config = merged(DEFAULTS, FAST)
    section = config
    for key in path[:-1]:
        section = section[key]
    del section[path[-1]]
    with pytest.raises(InputError) as caught:
        RingConfig.from_mapping(config)
    assert str(caught.value) == message


def test_an_unknown_key_or_a_section_that_is_no_mapping_is_refused():
    config = merged(DEFAULTS, FAST)
    bad = copy.deepcopy(config)
    bad["timeline"]["stop_margn_s"] = 5
    with pytest.raises(InputError, match=r"^config: timeline.stop_margn_s is not a known key$"):
        RingConfig.from_mapping(bad)
    bad = copy.deepcopy(config)
    bad["notify"]["email"]["from_"] = "x@y"
    with pytest.raises(InputError, match=r"notify\.email\.from_ is not a known key"):
        RingConfig.from_mapping(bad)
    with pytest.raises(InputError, match="config: top_k is not a known key"):
        RingConfig.from_mapping({**config, "top_k": 3})
    with pytest.raises(InputError, match="config: exec_health must be a mapping"):
        RingConfig.from_mapping({**config, "exec_health": 5})


def test_the_settings_are_frozen():
    typed = RingConfig.from_mapping(merged(DEFAULTS, FAST))
    with pytest.raises(dataclasses.FrozenInstanceError):
        typed.final_top_k = 1  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        typed.timeline.stop_margin_s = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        typed.limits_per_view["final"] = {}  # type: ignore[index]
    changed = dataclasses.replace(
        typed, timeline=dataclasses.replace(typed.timeline, stop_margin_s=9)
    )
    assert changed.timeline.stop_margin_s == 9 and typed.timeline.stop_margin_s != 9
    assert changed.to_mapping()["timeline"]["stop_margin_s"] == 9
