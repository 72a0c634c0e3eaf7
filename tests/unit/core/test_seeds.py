"""Guard seeds across a chain of rings: fresh, disjoint, and locked as chain_exposed_seeds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ringflow.core.errors import InputError
from ringflow.core.seeds import chain_rings, pick_guard_seeds, plan_seeds


def lock_ring(ring_dir: Path, plan: dict, continue_from: str | None) -> None:
    ring_dir.mkdir(parents=True, exist_ok=True)
    ring = {"ring_id": ring_dir.name, "continue_from": continue_from, **plan}
    (ring_dir / "RING.json").write_text(json.dumps(ring))


def test_three_ring_chain_gets_disjoint_guard_seeds(tmp_path):
    first = plan_seeds(None, 5)
    lock_ring(tmp_path / "ring1", first, None)
    second = plan_seeds(tmp_path / "ring1", 5)
    lock_ring(tmp_path / "ring2", second, "../ring1")
    third = plan_seeds(tmp_path / "ring2", 5)
    lock_ring(tmp_path / "ring3", third, "../ring2")

    assert first["guard_seeds"] == [3, 4, 5, 6, 7]
    assert second["guard_seeds"] == [8, 9, 10, 11, 12]
    assert third["guard_seeds"] == [13, 14, 15, 16, 17]
    groups = [set(p["guard_seeds"]) for p in (first, second, third)]
    for i, a in enumerate(groups):
        for b in groups[i + 1 :]:
            assert not a & b
    assert first["chain_exposed_seeds"] == [3, 4, 5, 6, 7]
    assert third["chain_exposed_seeds"] == sorted(set().union(*groups))
    assert third["chain_exposed_seeds"] == list(range(3, 18))

    walked = chain_rings(tmp_path / "ring3")
    assert [r.ring_id for r in walked] == ["ring3", "ring2", "ring1"]
    assert walked[0].ring_dir == str((tmp_path / "ring3").resolve())


def test_exposed_seeds_of_earlier_rings_are_skipped_even_if_not_guard_seeds(tmp_path):
    # A ring that exposed scattered seeds (say, by a larger guard elsewhere) pushes past them.
    lock_ring(tmp_path / "r1", {"guard_seeds": [3, 5], "chain_exposed_seeds": [3, 5, 9]}, None)
    plan = plan_seeds(tmp_path / "r1", 4)
    assert plan["guard_seeds"] == [4, 6, 7, 8]
    assert plan["chain_exposed_seeds"] == [3, 4, 5, 6, 7, 8, 9]


def test_pick_guard_seeds_never_uses_promotion_seeds():
    assert pick_guard_seeds(set(), 3) == [3, 4, 5]
    assert pick_guard_seeds({0, 1, 2, 4}, 2) == [3, 5]
    assert pick_guard_seeds({3, 4}, 0) == []
    with pytest.raises(ValueError, match="non-negative integer"):
        pick_guard_seeds(set(), -1)


def test_missing_previous_lock_file_is_a_clear_error(tmp_path):
    expected = r"previous ring's lock file .*ring0/RING\.json.*not found"
    with pytest.raises(InputError, match=expected):
        plan_seeds(tmp_path / "ring0", 5)


def test_missing_ring_further_up_the_chain_names_who_points_to_it(tmp_path):
    lock_ring(tmp_path / "ring2", {"guard_seeds": [8], "chain_exposed_seeds": [3, 8]}, "../ring1")
    with pytest.raises(InputError, match=r"ring1/RING\.json \(continue_from of .*ring2/RING\.json"):
        chain_rings(tmp_path / "ring2")


def test_malformed_lock_files_are_named(tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "RING.json").write_text("{not json")
    with pytest.raises(InputError, match=r"bad/RING\.json.*malformed JSON"):
        chain_rings(bad)
    (bad / "RING.json").write_text(json.dumps({"guard_seeds": [3], "continue_from": None}))
    with pytest.raises(InputError, match="missing 'chain_exposed_seeds'"):
        chain_rings(bad)
    (bad / "RING.json").write_text(json.dumps({"guard_seeds": ["3"], "chain_exposed_seeds": []}))
    with pytest.raises(InputError, match="'guard_seeds' must be a list of non-negative integers"):
        chain_rings(bad)
    (bad / "RING.json").write_text(
        json.dumps({"guard_seeds": [], "chain_exposed_seeds": [], "continue_from": 7})
    )
    with pytest.raises(InputError, match="'continue_from' must be a folder path"):
        chain_rings(bad)


def test_cycle_is_detected(tmp_path):
    lock_ring(tmp_path / "a", {"guard_seeds": [3], "chain_exposed_seeds": [3]}, "../b")
    lock_ring(tmp_path / "b", {"guard_seeds": [4], "chain_exposed_seeds": [4]}, "../a")
    with pytest.raises(InputError, match="cycle"):
        plan_seeds(tmp_path / "a", 5)
    lock_ring(tmp_path / "self", {"guard_seeds": [], "chain_exposed_seeds": []}, ".")
    with pytest.raises(InputError, match="cycle"):
        chain_rings(tmp_path / "self")
