"""What the driver says when the DAG first reaches a locked ring (workflow/hooks.py): a
refusal once, before anything runs, with the way on; a finished ring is never refused, and
what changed since it was locked is said in a note."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ringflow.core.layout import RingLayout
from ringflow.ring.lock import lock_ring
from ringflow.workflow.hooks import RunRefused, refuse_locked
from ringtools import REPO, scripted_config

DEFAULTS = str(REPO / "config" / "config.yaml")


@pytest.fixture
def locked(tmp_path, monkeypatch):
    """(configuration, ring folder) of a locked ring with its nodes imported."""
    from ringflow.nodes import import_static

    monkeypatch.chdir(tmp_path)
    config = scripted_config(tmp_path, "r")
    ring = lock_ring(config, tmp_path, now=0.0)
    import_static(ring)
    return config, Path(ring.ring_dir)


def _edit_the_scorer(ring: Path) -> None:
    task = Path(json.loads(RingLayout(ring).ring_json.read_text())["config"]["task"])
    with open(task / "scorer.py", "a") as scorer:
        scorer.write("# edited\n")


def test_edits_to_a_ring_that_runs_on_refuse_it_once_with_the_way_on(locked, capsys):
    config, ring = locked
    assert refuse_locked(ring, config, DEFAULTS) is True
    _edit_the_scorer(ring)
    with pytest.raises(RunRefused) as refused:
        refuse_locked(ring, config, DEFAULTS)
    assert refused.value.code == 1
    err = capsys.readouterr().err
    assert err.count("what it was given has changed since") == 1, err
    assert "continue_from=" in err and "ring_id=r-2" in err


def test_a_finished_ring_is_not_refused_and_says_what_no_longer_reaches_it(locked, capsys):
    config, ring = locked
    RingLayout(ring).stop_manifest.write_text("{}")
    assert refuse_locked(ring, config, DEFAULTS) is True
    assert capsys.readouterr().err == ""  # nothing changed: nothing to say
    _edit_the_scorer(ring)
    assert refuse_locked(ring, {**config, "promote_top_k": 7}, DEFAULTS) is True
    err = capsys.readouterr().err
    assert err.startswith(f"ringflow: note: the ring {ring} has finished")
    assert "the configuration (differs in: promote_top_k)" in err
    assert "the scorer, the validator or a file beside them was edited" in err
    assert "ring_id=r-2" in err and "Undo the edits" not in err


def test_a_stopped_ring_is_refused_before_its_jobs_with_the_stop_and_the_way_on(locked, capsys):
    config, ring = locked
    stop = {"reason": "the task's scorer failed on the baseline's output", "cause": "task"}
    RingLayout(ring).stopped.write_text(json.dumps(stop))
    with pytest.raises(RunRefused):
        refuse_locked(ring, config, DEFAULTS)
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"ringflow: the ring {ring} stopped: {stop['reason']}"
    assert err[-2].endswith("then run:") and "continue_from=" in err[-1]


def test_a_finished_ring_of_a_chain_file_leaves_the_changes_to_the_rings_after_it(locked, capsys):
    config, ring = locked
    RingLayout(ring).stop_manifest.write_text("{}")
    _edit_the_scorer(ring)
    assert refuse_locked(ring, config, DEFAULTS, ring_name="ring1") is True
    err = capsys.readouterr().err
    assert err.startswith(f"ringflow: note: the ring {ring} has finished")
    assert "The rings of the chain that continue ring1 take them" in err
    assert "continue_from=" not in err


def test_a_key_this_command_leaves_at_its_default_is_no_change_to_note(tmp_path, monkeypatch,
                                                                       capsys):  # fmt: skip
    from ringflow.config import config_defaults

    monkeypatch.chdir(tmp_path)
    default = config_defaults(DEFAULTS)["promote_top_k"]
    config = scripted_config(tmp_path, "r", promote_top_k=default + 2)
    ring = Path(lock_ring(config, tmp_path, now=0.0).ring_dir)
    RingLayout(ring).stop_manifest.write_text("{}")
    # A ring continuing this one would take its promote_top_k: nothing changes.
    assert refuse_locked(ring, {**config, "promote_top_k": default}, DEFAULTS) is True
    assert capsys.readouterr().err == ""
    assert refuse_locked(ring, {**config, "promote_top_k": default + 1}, DEFAULTS) is True
    assert "the configuration (differs in: promote_top_k)" in capsys.readouterr().err


def test_the_changes_to_a_finished_ring_go_on_from_the_newest_ring_of_its_chain(locked, capsys):
    config, ring = locked
    RingLayout(ring).stop_manifest.write_text("{}")
    later = ring.parent / "r-2"
    later.mkdir()
    lock = {"config": {"task": config["task"]}, "created_at": 5.0,
            "chain": {"parent_dir": str(ring.resolve()), "continues": "r"}}  # fmt: skip
    (later / "RING.json").write_text(json.dumps(lock))
    _edit_the_scorer(ring)
    refuse_locked(ring, config, DEFAULTS)
    err = capsys.readouterr().err
    assert "The ring r-2 continues its chain already and has not finished" in err, err
    (later / "stop_manifest.json").write_text("{}")
    refuse_locked(ring, config, DEFAULTS)
    err = capsys.readouterr().err
    assert "The ring r-2 continues its chain already. To run with the changes" in err, err
    assert "ring_id=r-3 continue_from=" in err and err.rstrip().endswith("r-2"), err
