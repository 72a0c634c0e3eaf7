"""A continuation guards on a view no earlier ring of its chain guarded on, while the task
declares one; otherwise it reuses them and says so (docs/guard.md#the-incumbent)."""

from __future__ import annotations

import json
from pathlib import Path

from ringflow.ring.chain import fresh_guard_views

VIEWS = {v: {"content_hash": f"content-{v}"} for v in ("ga", "gb", "gc")}


def lock(
    root: Path, ring_id: str, guard_views: list[str], previous: str | None, guarded: bool = True
) -> Path:
    """A ring's lock and, where it `guarded`, the verdict of a finalist guarded on its views."""
    root.mkdir(parents=True)
    (root / "RING.json").write_text(json.dumps({
        "ring_id": ring_id, "guard_seeds": [3], "chain_exposed_seeds": [],
        "continue_from": previous, "guard_views": guard_views, "views": VIEWS}))  # fmt: skip
    if guarded:
        (root / "selection").mkdir()
        verdict = {"node": "n001-a", "guard": {"views": guard_views, "ran": True}}
        (root / "selection" / "verdict-1.json").write_text(json.dumps(verdict))
    return root


def test_a_first_ring_guards_on_every_declared_view():
    assert fresh_guard_views(None, ["ga", "gb"], VIEWS, configured=False) == (["ga", "gb"], None)


def test_a_continuation_keeps_the_views_no_earlier_ring_guarded_on(tmp_path):
    r1 = lock(tmp_path / "r1", "r1", ["ga"], None)
    r2 = lock(tmp_path / "r2", "r2", ["gb"], "../r1")
    views, info = fresh_guard_views(r2, ["ga", "gb", "gc"], VIEWS, configured=False)
    assert views == ["gc"]
    assert info["used_before"] == {"ga": "r1", "gb": "r2"} and info["reused"] == []
    # From r1 alone, two views are still fresh.
    assert fresh_guard_views(r1, ["ga", "gb", "gc"], VIEWS, configured=False)[0] == ["gb", "gc"]


def test_when_every_view_was_used_all_are_reused_and_said_so(tmp_path):
    r1 = lock(tmp_path / "r1", "r1", ["ga", "gb"], None)
    views, info = fresh_guard_views(r1, ["ga", "gb"], VIEWS, configured=False)
    assert views == ["ga", "gb"] and info["reused"] == ["ga", "gb"]


def test_a_view_counts_as_used_by_its_content_whatever_its_name(tmp_path):
    r1 = lock(tmp_path / "r1", "r1", ["ga"], None)
    renamed = {**VIEWS, "again": {"content_hash": "content-ga"}}
    views, info = fresh_guard_views(r1, ["again", "gb"], renamed, configured=False)
    assert views == ["gb"] and info["used_before"] == {"again": "r1"}


def test_guard_views_the_configuration_names_are_kept(tmp_path):
    r1 = lock(tmp_path / "r1", "r1", ["ga"], None)
    views, info = fresh_guard_views(r1, ["ga", "gb"], VIEWS, configured=True)
    assert views == ["ga", "gb"] and info["reused"] == ["ga"]


def test_a_ring_stopped_before_its_guard_used_no_guard_view(tmp_path):
    r1 = lock(tmp_path / "r1", "r1", ["ga", "gb"], None, guarded=False)
    views, info = fresh_guard_views(r1, ["ga", "gb"], VIEWS, configured=False)
    assert views == ["ga", "gb"] and info["used_before"] == {} and info["reused"] == []
    r2 = lock(tmp_path / "r2", "r2", ["ga"], "../r1")
    assert fresh_guard_views(r2, ["ga", "gb"], VIEWS, configured=False)[0] == ["gb"]
