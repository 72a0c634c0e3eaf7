"""The locked ring as a typed object: read from RING.json and written back unchanged."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from ringflow.core.clock import load_ring
from ringflow.core.errors import InputError
from ringflow.core.jsonio import atomic_write_json, sha256_json
from ringflow.core.layout import RingLayout
from ringflow.core.state import LockedProgram, LockedSandbox, LockedTask, LockedView, Ring
from ringflow.ring.lock import lock_ring
from ringtools import scripted_config


@pytest.fixture
def locked(tmp_path):
    ring = lock_ring(scripted_config(tmp_path, "state"), tmp_path, now=0.0)
    return ring, json.loads((ring.layout.ring_json).read_text())


def test_a_real_lock_round_trips_exactly(locked, tmp_path):
    ring, record = locked
    assert isinstance(ring, Ring)
    again = Ring.from_record(record)
    assert again.to_record() == record
    assert sha256_json(again.to_record()) == sha256_json(record)
    assert again == ring == load_ring(ring.ring_dir)
    # Written back, the file is byte for byte the one the lock wrote.
    copy = tmp_path / "copy.json"
    atomic_write_json(copy, again.to_record())
    assert copy.read_bytes() == ring.layout.ring_json.read_bytes()


def test_fields_are_typed(locked):
    ring, record = locked
    assert ring.ring_id == record["ring_id"] == "state"
    assert ring.ring_dir == record["ring_dir"]
    assert (
        isinstance(ring.search_views, tuple) and list(ring.search_views) == record["search_views"]
    )
    assert isinstance(ring.guard_seeds, tuple) and list(ring.guard_seeds) == record["guard_seeds"]
    assert ring.config.to_mapping() == record["config"]
    assert isinstance(ring.task, LockedTask) and ring.task.to_record() == record["task"]
    assert (ring.task.name, ring.task.direction) == (record["task"]["name"], "maximize")
    assert ring.task.dir == record["task"]["dir"] and ring.task.scorer == record["task"]["scorer"]
    for name, view in ring.views.items():
        assert isinstance(view, LockedView) and view.to_record() == record["views"][name]
        assert view.name == name and view.content_hash == record["views"][name]["content_hash"]
        assert view.snapshot == Path(record["views"][name]["inputs_snapshot"])
        assert view.size_bytes == record["views"][name]["input_bytes"]
    assert isinstance(ring.program, LockedProgram) and ring.program.to_record() == record["program"]
    assert ring.program.python == record["program"]["executable"]
    assert ring.program.bound_dirs == tuple(Path(d) for d in record["program"]["dirs"])
    assert isinstance(ring.sandbox, LockedSandbox) and ring.sandbox.to_record() == record["sandbox"]
    assert ring.sandbox.mode == record["sandbox"]["mode"] and ring.sandbox.confined
    assert ring.layout == RingLayout(ring.root)
    assert ring.extra == {}


def test_a_partial_record_gets_defaults():
    ring = Ring.from_record({"ring_id": "r", "ring_dir": "/runs/r", "search_views": ["a"]})
    assert ring.search_views == ("a",)
    assert ring.guard_views == () and ring.guard_seeds == () and ring.tree_ignore == ()
    assert ring.config is None and ring.views == {} and ring.task == LockedTask()
    assert ring.final_view is None and ring.continue_from is None and ring.store is None
    assert ring.guard_views_reused is False
    # Only the keys it held are written back.
    assert ring.to_record() == {"ring_id": "r", "ring_dir": "/runs/r", "search_views": ["a"]}


def test_a_view_keeps_its_record_key_for_key_and_says_what_it_lacks():
    old = {"name": "proxy", "dir": "/task/views/proxy", "bytes": 120, "custom": [1, 2]}
    view = LockedView.from_record(old)
    assert view.to_record() == old  # no key added, the unknown one kept
    assert view.extra == {"custom": [1, 2]} and view.inputs_snapshot is None
    assert view.size_bytes == 120  # older locks: the whole view's size
    with pytest.raises(InputError, match="no inputs snapshot"):
        _ = view.snapshot
    with pytest.raises(InputError, match=r"views\.proxy"):
        Ring.from_record({"ring_id": "r", "ring_dir": "/r", "views": {"proxy": ["not", "a"]}})


def test_a_task_locked_before_scorer_modes_resamples_and_reorders_nothing():
    old = {"dir": "/task", "name": "toy", "direction": "minimize", "scorer": "python s.py"}
    task = LockedTask.from_record(old)
    assert task.to_record() == old
    assert task.mode == "resample" and task.rows_reordered == () and task.validator is None
    assert LockedTask.from_record({**old, "scorer_mode": "fixed"}).mode == "fixed"
    with pytest.raises(InputError, match="ring lock: task"):
        Ring.from_record({"ring_id": "r", "ring_dir": "/r", "task": "toy"})


def test_the_program_and_sandbox_keep_their_records_and_say_what_they_lack():
    program = {"executable": "/env/bin/python", "dirs": ["/env"], "abi": "cp311"}
    locked = Ring.from_record(
        {"ring_id": "r", "ring_dir": "/r", "program": program, "sandbox": {"mode": "none"}}
    )
    assert locked.program.extra == {"abi": "cp311"} and locked.program.to_record() == program
    assert locked.program.bound_dirs == (Path("/env"),) and not locked.sandbox.confined
    assert locked.to_record()["sandbox"] == {"mode": "none"}
    bare = Ring.from_record({"ring_id": "r", "ring_dir": "/r"})
    assert bare.program == LockedProgram() and bare.program.bound_dirs == ()
    with pytest.raises(InputError, match="no program interpreter"):
        _ = bare.program.python
    with pytest.raises(InputError, match="ring lock: sandbox"):
        Ring.from_record({"ring_id": "r", "ring_dir": "/r", "sandbox": "root"})


def test_unknown_keys_are_kept():
    record = {"ring_id": "r", "ring_dir": "/runs/r", "future_key": {"x": 1}}
    ring = Ring.from_record(record)
    assert ring.extra == {"future_key": {"x": 1}}
    assert ring.to_record() == record


@pytest.mark.parametrize("missing", [("ring_id",), ("ring_dir",), ("ring_id", "ring_dir")])
def test_a_record_without_its_identity_is_refused(missing):
    record = {"ring_id": "r", "ring_dir": "/runs/r", "search_views": ["a"]}
    for key in missing:
        del record[key]
    with pytest.raises(InputError) as caught:
        Ring.from_record(record, source="/runs/r/RING.json")
    message = str(caught.value)
    assert message.startswith("/runs/r/RING.json: not a ring lock")
    for key in missing:
        assert repr(key) in message


def test_a_lock_file_without_its_identity_is_refused(tmp_path):
    (tmp_path / "RING.json").write_text(json.dumps({"ring_dir": str(tmp_path)}))
    with pytest.raises(InputError, match=r"RING\.json: not a ring lock \(missing 'ring_id'\)"):
        load_ring(tmp_path)


def test_not_an_object_is_refused():
    with pytest.raises(InputError, match="must hold a JSON object"):
        Ring.from_record(["ring_id"])  # type: ignore[arg-type]


def test_the_ring_is_frozen(locked):
    ring, _ = locked
    with pytest.raises(dataclasses.FrozenInstanceError):
        ring.ring_id = "other"  # type: ignore[misc]
    changed = dataclasses.replace(ring, final_view="other")
    assert changed.final_view == "other" and ring.final_view != "other"
    assert changed.to_record()["final_view"] == "other"
