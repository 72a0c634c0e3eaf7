"""A ring runs where it was locked: a step on a copied or moved ring folder is refused
before it writes anything (docs/ring-folder.md#the-lock-and-the-clock)."""

from __future__ import annotations

import shutil

import pytest

from ringflow import cli
from ringflow.core.clock import refuse_moved_ring
from ringflow.core.errors import InputError
from ringflow.ring.lock import lock_ring
from ringtools import scripted_config


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
