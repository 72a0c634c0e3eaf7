"""The ring's clock as jobs see it: search work ends at the live cutoff, its scoring may
settle a little longer, final selection runs to stop_at minus the margin."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from ringflow.core.clock import (
    deadline_for,
    final_deadline,
    load_ring,
    scoring_deadline_for,
    settle_deadline,
)
from ringflow.core.jsonio import atomic_write_json, read_json
from ringflow.core.reserve import CutoffFile
from ringflow.ring.lock import lock_ring
from ringtools import scripted_config


def make_ring(tmp_path, final_reserve_min: float) -> dict:
    timeline = {"duration_min": 60, "final_reserve_min": final_reserve_min,
                "settle_extra_s": 30, "stop_margin_s": 60}  # fmt: skip
    config = scripted_config(tmp_path, "clock", timeline=timeline,
                             exec_health={"term_grace_s": 10})  # fmt: skip
    return lock_ring(config, tmp_path, now=0.0)


@pytest.fixture
def ring(tmp_path):
    return make_ring(tmp_path, final_reserve_min=20)


def test_search_work_follows_the_live_cutoff(ring):
    search = deadline_for(ring, "proxy", "s0")
    assert search() == 3600 - 1200
    CutoffFile(Path(ring.ring_dir) / "cutoff.json").move_earlier(1000.0, why="test")
    assert search() == 1000.0
    assert deadline_for(ring, "proxy", "s0-ablate")() == 1000.0


def test_final_selection_runs_to_stop_at_minus_the_margin(ring):
    for view, variant in (("proxy", "s1"), ("x3", "g3"), ("proxy", "blind-s0"), ("final", "s0")):
        assert deadline_for(ring, view, variant)() == final_deadline(ring) == 3600 - 60


def test_scoring_of_search_work_settles_after_the_cutoff(ring):
    assert settle_deadline(ring) == 2400 + 10 + 30
    assert scoring_deadline_for(ring, "proxy", "s0")() == 2440
    assert scoring_deadline_for(ring, "x3", "g4")() == 3540


def test_the_settle_phase_never_runs_past_stop_at_minus_the_margin(tmp_path):
    late = make_ring(tmp_path, final_reserve_min=1.5)  # cutoff 3510
    assert settle_deadline(late) == 3540


def test_a_ring_parsed_by_one_path_is_found_by_another(ring, monkeypatch):
    # The resident server reads a ring ahead by its job's folder joined to the ring's
    # path; the step names it as its rule gave it, relative to that folder.
    path = Path(ring.ring_dir) / "RING.json"
    settled = time.time() - 5
    os.utime(path, (settled, settled))
    first = load_ring(ring.ring_dir)
    monkeypatch.chdir(Path(ring.ring_dir).parent)
    assert load_ring(Path(ring.ring_dir).name) is first
    assert load_ring(f"./{Path(ring.ring_dir).name}/") is first


def test_a_ring_is_parsed_once_per_version_of_its_lock(ring):
    # A step reads its ring more than once, and the resident server reads it ahead of its
    # forks; a RING.json written since (or too recently to tell apart) is read again.
    path = Path(ring.ring_dir) / "RING.json"
    assert load_ring(ring.ring_dir) is not load_ring(ring.ring_dir)  # written just now
    settled = time.time() - 5
    os.utime(path, (settled, settled))
    first = load_ring(ring.ring_dir)
    assert load_ring(ring.ring_dir) is first
    record = read_json(path)
    path.chmod(0o644)
    atomic_write_json(path, {**record, "search_hash": "another"})
    os.utime(path, (settled, settled))
    assert load_ring(ring.ring_dir).search_hash == "another"
