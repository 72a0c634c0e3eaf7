"""A ring runs where it was locked: a step (or a command that writes) on a copied or moved
ring folder is refused before it writes anything; a command that reads reads the folder
it is given (docs/ring-folder.md#the-lock-and-the-clock)."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pytest

from ringflow import cli
from ringflow.core.clock import load_ring, refuse_moved_ring
from ringflow.core.errors import InputError
from ringflow.ring.edits import find_edits
from ringflow.ring.lock import lock_ring
from ringflow.workflow.hooks import RunRefused, refuse_locked
from ringtools import REPO, locked_ring, make_candidate, scripted_config


def tree(folder):
    return sorted(
        (str(p.relative_to(folder)), p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()
    )


@pytest.fixture
def ring(tmp_path):
    return lock_ring(scripted_config(tmp_path, "moved"), tmp_path, now=0.0).root


def test_a_step_on_a_copy_is_refused_and_the_original_is_left_alone(ring, tmp_path, capsys):
    copy = tmp_path / "elsewhere" / "moved"
    shutil.copytree(ring, copy)
    before = tree(ring)
    out = copy / "nodes" / "static.json"
    assert cli.main(["step", "import-nodes", str(copy), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"this ring was locked at {ring}" in err and f"run the ring from {ring}" in err
    assert tree(ring) == before and not out.exists()


def test_a_moved_ring_is_refused_by_name(ring, tmp_path):
    moved = tmp_path / "moved-away"
    ring.rename(moved)
    with pytest.raises(InputError, match=f"locked at {ring}"):
        refuse_moved_ring(moved)


def test_the_ring_in_place_passes_by_any_path_and_an_unlocked_folder_too(ring, tmp_path):
    refuse_moved_ring(ring)
    link = tmp_path / "link"
    link.symlink_to(ring)
    refuse_moved_ring(link)
    refuse_moved_ring(tmp_path / "not-locked-yet")


# ---- reading a moved ring ---------------------------------------------------------------


def test_a_moved_ring_is_read_as_the_folder_named_and_one_in_place_as_recorded(ring, tmp_path):
    recorded = load_ring(ring).ring_dir
    link = tmp_path / "link"
    link.symlink_to(ring)
    assert load_ring(link).ring_dir == recorded
    moved = tmp_path / "archive" / "moved"
    moved.parent.mkdir()
    ring.rename(moved)
    assert load_ring(moved).ring_dir == str(moved.resolve())
    assert load_ring(moved).layout.ledger == moved.resolve() / "ledger.jsonl"


def test_reading_commands_read_a_copy_whose_original_is_gone(ring, tmp_path, capsys):
    copy = tmp_path / "elsewhere" / "moved"
    shutil.copytree(ring, copy)
    shutil.rmtree(ring)
    assert cli.main(["summary", str(copy)]) == 0
    out = capsys.readouterr().out
    assert f"folder   {copy.resolve()}" in out and str(ring) not in out
    assert cli.main(["status", str(copy)]) == 0
    assert not ring.exists()


def test_commands_that_write_refuse_a_copy_and_write_nothing(ring, tmp_path, capsys):
    copy = tmp_path / "elsewhere" / "moved"
    shutil.copytree(ring, copy)
    before, copied = tree(ring), tree(copy)
    for argv in (["taint", str(copy), "--why", "a test"], ["reserve", str(copy)],
                 ["digest", "--send", str(copy)], ["store", "repair", str(copy)],
                 ["ledger", "repair", str(copy)]):  # fmt: skip
        assert cli.main(argv) == 2, argv
        assert f"this ring was locked at {ring}" in capsys.readouterr().err, argv
    assert tree(ring) == before and tree(copy) == copied


def test_every_user_command_on_a_ring_is_a_reader_or_refuses_a_moved_ring():
    parser = cli.build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    readers = set()
    for name, sub in commands.items():
        if name in ("check", "step") or "ring_dir" not in {a.dest for a in sub._actions}:
            continue
        # The store is read by `store check`; the ledger's only action is a repair.
        action = {"store": "check", "ledger": "repair"}.get(name)
        if not cli.writes_to_ring(argparse.Namespace(command=name, action=action, send=False)):
            readers.add(name)
    assert readers == {"status", "summary", "digest", "health-digest", "report", "verify",
                       "key", "export", "package", "store"}  # fmt: skip


def test_checking_a_store_that_is_gone_says_so_and_does_not_make_it(ring, capsys):
    store = Path(load_ring(ring).store)
    shutil.rmtree(store)
    assert cli.main(["store", "check", str(ring)]) == 2
    assert f"store {store}: missing" in capsys.readouterr().err
    assert cli.main(["verify", str(ring)]) == 1
    assert f"store {store}: missing" in capsys.readouterr().out
    assert not store.exists()


def test_a_removed_task_folder_is_one_finding(tmp_path):
    make_candidate(tmp_path / "cands" / "a", mean=0.5)
    ring = locked_ring(tmp_path, tmp_path / "cands", "gone-task")
    assert find_edits(ring) == []
    task = Path(load_ring(ring).task.dir)
    shutil.rmtree(task)
    assert find_edits(ring) == [f"{task}: the task folder was removed after the ring was locked"]


def test_the_driver_refuses_a_copied_ring_before_anything_of_it_runs(tmp_path, capsys):
    config = scripted_config(tmp_path, "driven")
    ring = lock_ring(config, tmp_path, now=0.0).root
    defaults = str(REPO / "config" / "config.yaml")
    assert refuse_locked(ring, config, defaults) is True
    copy = tmp_path / "elsewhere" / "driven"
    shutil.copytree(ring, copy)
    with pytest.raises(RunRefused):
        refuse_locked(copy, config, defaults)
    assert f"ringflow: error: {copy}: this ring was locked at {ring}" in capsys.readouterr().err
