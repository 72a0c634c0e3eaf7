"""Chains cannot switch task silently (issue: `continue_from` without `task=` ran the demo
task on a chain of the user's own task): a continuation inherits its parent's task,
candidates, baseline and configuration; another task or direction is refused."""

from __future__ import annotations

import json

import pytest
import yaml

from ringflow.errors import InputError
from ringflow.nodes import import_static
from ringflow.ring.chain import inherit_config, refuse_task_switch
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
    assert r2["task"]["dir"] == r1["task"]["dir"]
    assert r2["candidates_dir"] == r1["candidates_dir"]
    assert r2["baseline_dir"] == r1["baseline_dir"]
    assert r2["chain"] == {"continues": "r1", "parent_dir": r1["ring_dir"], "changed": {}}


def test_a_key_given_another_value_is_kept_and_shown_as_changed(parent):
    work, _ = parent
    config = _continuation(final_top_k=2)
    inherit_config(config, full_config(), work)
    assert config["final_top_k"] == 2
    r2 = lock_ring(config, work)
    assert r2["chain"]["changed"] == {"final_top_k": {"parent": 1, "this": 2}}
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
        refuse_task_switch(config, work)
    with pytest.raises(InputError, match="refusing to continue"):
        lock_ring(config, work)
    assert not (work / "runs" / "r2" / "RING.json").exists()
    (other / "task.yaml").write_text(yaml.safe_dump({**spec, "name": "another"}))
    with pytest.raises(InputError, match="names task 'another'"):
        refuse_task_switch(config, work)


def test_the_same_task_named_again_is_allowed(parent):
    work, r1 = parent
    config = _continuation(task=r1["task"]["dir"])
    refuse_task_switch(config, work)
    assert lock_ring(config, work)["task"]["name"] == "scripted"


def test_a_first_ring_inherits_nothing(tmp_path):
    config = full_config(ring_id="solo")
    assert inherit_config(config, full_config(), tmp_path) == []
    refuse_task_switch(config, tmp_path)
