"""Chains cannot switch task silently (issue: `continue_from` without `task=` ran the demo
task on a chain of the user's own task): a continuation inherits its parent's task,
candidates, baseline and configuration; another task or direction is refused."""

from __future__ import annotations

import json

import pytest
import yaml

from ringflow.core.errors import InputError
from ringflow.core.settings import RingConfig
from ringflow.nodes import import_static
from ringflow.ring.chain import (
    command_line_keys,
    inherit_config,
    place_beside_parent,
    refuse_task_switch,
)
from ringflow.ring.lock import lock_ring
from ringtools import DEFAULTS, full_config, make_candidate, make_task


@pytest.fixture
def parent(tmp_path):
    task = make_task(tmp_path)
    make_candidate(tmp_path / "cands" / "a", mean=0.5)
    make_candidate(tmp_path / "base", mean=0.4)
    config = full_config(ring_id="r1", task=str(task), candidates=str(tmp_path / "cands"),
                         baseline=str(tmp_path / "base"), promote_top_k=1,
                         guard={**DEFAULTS["guard"], "seeds": 3})  # fmt: skip
    ring = lock_ring(config, tmp_path)
    import_static(ring)
    return tmp_path, ring


def _continuation(**overrides) -> dict:
    # What Snakemake hands the workflow for `--config ring_id=r2 continue_from=runs/r1`.
    return full_config(ring_id="r2", continue_from="runs/r1", **overrides)


def test_a_continuation_inherits_task_candidates_baseline_and_configuration(parent):
    work, r1 = parent
    config = _continuation()
    taken = inherit_config(config, full_config(), work)
    assert "promote_top_k" in taken and "guard.seeds" in taken
    assert config["promote_top_k"] == 1 and config["guard"]["seeds"] == 3
    r2 = lock_ring(config, work)
    assert r2.task.dir == r1.task.dir
    assert r2.candidates_dir == r1.candidates_dir
    assert r2.baseline_dir == r1.baseline_dir
    assert r2.chain == {"continues": "r1", "parent_dir": r1.ring_dir, "changed": {}}


def test_a_key_given_another_value_is_kept_and_shown_as_changed(parent):
    work, _ = parent
    config = _continuation(final_top_k=2)
    inherit_config(config, full_config(), work)
    assert config["final_top_k"] == 2
    r2 = lock_ring(config, work)
    assert r2.chain["changed"] == {"final_top_k": {"parent": 3, "this": 2}}
    saved = json.loads((work / "runs" / "r2" / "RING.json").read_text())
    assert saved["chain"]["changed"]["final_top_k"]["this"] == 2


def test_another_task_or_direction_is_refused_with_the_reason(parent, tmp_path):
    work, _ = parent
    other = make_task(tmp_path / "other")
    spec = yaml.safe_load((other / "task.yaml").read_text())
    (other / "task.yaml").write_text(yaml.safe_dump({**spec, "direction": "minimize"}))
    config = _continuation(task=str(other))
    with pytest.raises(InputError, match=r"it ran task 'scripted' \(maximize\).*'scripted' "
                       r"\(minimize\).*leave task empty"):  # fmt: skip
        refuse_task_switch(RingConfig.from_mapping(config), work)
    with pytest.raises(InputError, match="refusing to continue"):
        lock_ring(config, work)
    assert not (work / "runs" / "r2" / "RING.json").exists()
    (other / "task.yaml").write_text(yaml.safe_dump({**spec, "name": "another"}))
    with pytest.raises(InputError, match="names task 'another'"):
        refuse_task_switch(RingConfig.from_mapping(config), work)


def test_the_same_task_named_again_is_allowed(parent):
    work, r1 = parent
    config = _continuation(task=r1.task.dir)
    refuse_task_switch(RingConfig.from_mapping(config), work)
    assert lock_ring(config, work).task.name == "scripted"


def test_a_first_ring_inherits_nothing(tmp_path):
    config = full_config(ring_id="solo")
    assert inherit_config(config, full_config(), tmp_path) == []
    refuse_task_switch(RingConfig.from_mapping(config), tmp_path)


def test_a_key_given_on_the_command_line_wins_even_null_or_the_default(parent, tmp_path):
    work, _ = parent
    r1 = json.loads((work / "runs" / "r1" / "RING.json").read_text())
    assert r1["config"]["engineer"]["command"] is None
    # A parent with the built-in engineer, and a continuation that turns it off with null.
    r1["config"]["engineer"] = {**r1["config"]["engineer"], "command": "builtin"}
    (work / "runs" / "r1" / "RING.json").chmod(0o644)
    (work / "runs" / "r1" / "RING.json").write_text(json.dumps(r1))
    argv = ["snakemake", "--config", "ring_id=r2", "engineer={command: null}",
            "promote_top_k=3"]  # fmt: skip
    given = set(command_line_keys(argv))
    assert given == {"ring_id", "engineer.command", "promote_top_k"}
    config = _continuation()
    taken = inherit_config(config, full_config(), work, given=given)
    assert config["engineer"]["command"] is None and "engineer.command" not in taken
    assert config["promote_top_k"] == 3  # the default's own value, given: kept
    from ringflow.ring.chain import describe, parent_lock

    parent = parent_lock(config["continue_from"], work)
    changed = describe(parent, RingConfig.from_mapping(config), {
        "task": r1["task"]["dir"], "candidates": r1["candidates_dir"],
        "baseline": r1["baseline_dir"]})["changed"]  # fmt: skip
    assert changed["engineer.command"] == {"parent": "builtin", "this": None}
    assert changed["promote_top_k"] == {"parent": 1, "this": 3}


def test_command_line_keys_come_from_every_config_option():
    argv = ["snakemake", "-C", "a=1", "--profile", "p", "--config=b.c=2", "--config",
            "d={e: {f: null}, g: 1}"]  # fmt: skip
    # The last --config option replaces earlier ones in Snakemake; every key is noted.
    assert set(command_line_keys(argv)) == {"a", "b.c", "d.e.f", "d.g"}


def test_a_continuation_of_a_ring_elsewhere_runs_beside_it_unless_told_where(parent, tmp_path):
    work, r1 = parent
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    defaults = full_config()
    config = full_config(ring_id="r2", continue_from=r1.ring_dir)
    assert place_beside_parent(config, defaults, elsewhere, given=set())
    assert config["runs_dir"] == str(work / "runs")
    assert lock_ring(config, elsewhere).ring_dir == str(work / "runs" / "r2")
    # A runs folder given on the command line, or in a configuration file, is kept.
    for given, runs in ((set(), "mine"), ({"runs_dir"}, defaults["runs_dir"])):
        config = full_config(ring_id="r3", continue_from=r1.ring_dir, runs_dir=runs)
        assert not place_beside_parent(config, defaults, elsewhere, given=given)
        assert config["runs_dir"] == runs
    # Already beside it, or a parent not locked yet (a chain's): the configuration as written.
    for where, previous in ((work, r1.ring_dir), (elsewhere, str(work / "runs" / "later"))):
        config = full_config(ring_id="r4", continue_from=previous)
        assert not place_beside_parent(config, defaults, where, given=set())
        assert config["runs_dir"] == defaults["runs_dir"]
