"""Locking a ring: frozen once, refused under another configuration or environment."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import re
from pathlib import Path

import pytest

from ringflow.core.errors import InputError, MachineryError, RingflowError
from ringflow.core.jsonio import sha256_json
from ringflow.core.settings import RingConfig
from ringflow.execute import check_environment
from ringflow.ring.inputs import check_inputs
from ringflow.ring.lock import check_existing_lock, lock_ring
from ringtools import scripted_config


@pytest.fixture
def config(tmp_path):
    return scripted_config(tmp_path, "locked")


def test_a_ring_is_locked_once_with_its_clock_and_views(tmp_path, config):
    ring = lock_ring(config, tmp_path, now=1000.0)
    again = lock_ring(config, tmp_path, now=5000.0)
    assert again == ring and ring.start == 1000.0
    assert ring.stop_at == 1000.0 + 60 * config["timeline"]["duration_min"]
    assert list(ring.search_views) == ["proxy", "x3"] and ring.final_view == "final"
    manifest = json.loads((tmp_path / "runs" / "locked" / "views" / "proxy.json").read_text())
    assert manifest["content_hash"] == ring.views["proxy"].content_hash
    assert manifest["limits"] == config["limits"]
    cutoff = json.loads((tmp_path / "runs" / "locked" / "cutoff.json").read_text())
    assert cutoff["cutoff"] == ring.stop_at - 60 * config["timeline"]["final_reserve_min"]


def test_a_timeline_with_no_time_to_search_is_refused_before_anything_is_locked(tmp_path, config):
    short = copy.deepcopy(config)
    short["timeline"].update(duration_min=12, final_reserve_min=20)
    with pytest.raises(InputError, match=r"final_reserve_min \(20\) is not shorter than "
                       r"timeline.duration_min \(12\)"):  # fmt: skip
        lock_ring(short, tmp_path)
    ring = tmp_path / "runs" / "locked"
    assert not (ring / "RING.json").exists() and not (ring / "cutoff.json").exists()
    # An engineer's sessions need time before the hand-over point (cutoff - node tail).
    tail = copy.deepcopy(config)
    tail["timeline"].update(duration_min=12, final_reserve_min=4, node_tail_min=8)
    tail["engineer"]["command"] = "builtin"
    with pytest.raises(InputError, match=r"node_tail_min \(8\) is not shorter than the "
                       r"search's 8 min"):  # fmt: skip
        lock_ring(tail, tmp_path)
    tail["engineer"]["command"] = None  # no sessions: the node tail is not read
    assert lock_ring(tail, tmp_path).initial_cutoff > 0


def test_another_configuration_is_refused_naming_what_differs(tmp_path, config):
    lock_ring(config, tmp_path)
    changed = copy.deepcopy(config)
    changed["promote_top_k"] = 9
    with pytest.raises(InputError, match="differs in: promote_top_k"):
        check_existing_lock(RingConfig.from_mapping(changed), tmp_path)
    with pytest.raises(InputError, match="locked with another configuration"):
        lock_ring(changed, tmp_path)


def test_a_job_in_another_environment_refuses_to_run(tmp_path, config):
    ring = lock_ring(config, tmp_path)
    check_environment(ring)
    environment = copy.deepcopy(ring.environment)
    stamp = copy.deepcopy(ring.environment_stamp)
    # Locked when another package was installed: its folders' stamp and its list differ.
    environment["packages"].append("torch==2.9.0")
    stamp["folders"][0][1] -= 1
    moved = dataclasses.replace(
        ring,
        environment=environment,
        environment_stamp=stamp,
        env_key=sha256_json(environment),
    )
    with pytest.raises(RingflowError, match=r"environment differs.*packages.*torch==2.9.0"):
        check_environment(moved)


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("candidates", "", "'candidates' must name a folder"),
        ("baseline", "", "'baseline' must name a solution folder, or be null"),
        ("candidates", "missing-folder", r"candidates folder .* not found"),
        ("continue_from", "runs/nothing", "is not a ring"),
    ],
)
def test_bad_paths_get_clear_errors(tmp_path, config, key, value, message):
    config[key] = value
    with pytest.raises(InputError, match=message):
        lock_ring(config, tmp_path)


def test_a_bad_task_is_refused(tmp_path, config):
    task = Path(config["task"])
    (task / "task.yaml").write_text("name: t\ndirection: upward\nscorer: s\n")
    with pytest.raises(InputError, match="direction must be one of"):
        lock_ring(config, tmp_path)


def test_locking_changes_nothing_in_the_task_and_snapshots_its_inputs(tmp_path, config):
    labels = Path(config["task"]) / "views" / "proxy" / "labels"
    labels.chmod(0o755)
    ring = lock_ring(config, tmp_path)
    assert labels.stat().st_mode & 0o777 == 0o755
    snapshot = Path(ring.views["proxy"].inputs_snapshot)
    assert snapshot.parent == Path(ring.ring_dir) / "inputs"
    assert re.fullmatch(r"view-[0-9a-f]{8}", snapshot.name), "a name that does not say proxy"
    original = Path(config["task"]) / "views" / "proxy" / "inputs" / "data.txt"
    assert (snapshot / "data.txt").read_text() == original.read_text()
    assert check_inputs(snapshot, ring.views["proxy"].inputs_files) is None


def test_an_input_rewritten_in_place_after_the_lock_is_noticed(tmp_path, config):
    """`cp -p` style: same size, inode and mtime; only ctime tells."""
    ring = lock_ring(config, tmp_path)
    original = Path(config["task"]) / "views" / "proxy" / "inputs" / "data.txt"
    st = original.stat()
    text = original.read_text()
    snapshot = Path(ring.views["proxy"].inputs_snapshot)
    records = ring.views["proxy"].inputs_files
    original.write_text(text)  # the same bytes again: a new ctime, no change
    assert check_inputs(snapshot, records) is None
    original.write_text(text.upper() if text.upper() != text else text.lower())
    os.utime(original, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert original.stat().st_size == st.st_size and original.stat().st_ino == st.st_ino
    problem = check_inputs(snapshot, records)
    assert problem == "data.txt was changed after the ring was locked"


def test_a_missing_program_interpreter_refuses_the_lock(tmp_path, config):
    config["program"] = {"python": str(tmp_path / "no-such-env" / "bin" / "python")}
    with pytest.raises(MachineryError, match=r"cannot start: the program interpreter .* does not"):
        lock_ring(config, tmp_path)
    assert not (tmp_path / "runs" / "locked" / "RING.json").exists()


def test_a_ring_refuses_to_continue_from_an_ancestor_that_does_not_verify(tmp_path, config):
    first = lock_ring(config, tmp_path)
    ledger = Path(first.ring_dir) / "ledger.jsonl"
    record = json.loads(ledger.read_text().splitlines()[0])
    record["ring_id"] = "someone-else"
    ledger.write_text(json.dumps(record) + "\n")
    second = {**config, "ring_id": "next", "continue_from": "runs/locked"}
    with pytest.raises(InputError, match="does not verify"):
        lock_ring(second, tmp_path)
    assert not (tmp_path / "runs" / "next" / "RING.json").exists()
