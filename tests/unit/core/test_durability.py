"""Records synced as they are written, or together at the end of a group
(docs/ring-folder.md#durability)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ringflow.core.durability import group_commit, grouped
from ringflow.core.jsonio import atomic_write_json
from ringflow.core.layout import RingLayout
from ringflow.core.ledger import Ledger, ledger_anchors
from ringflow.core.records import record_problems, write_record


def anchored_ledger(root: Path) -> Ledger:
    """A ring's ledger: beside a RING.json naming a store, so its heads go to the store."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "RING.json").write_text(json.dumps({"ring_id": "r", "store": str(root / "store")}))
    return Ledger(RingLayout(root).ledger)


def store_heads(ledger: Ledger) -> list[tuple[int, str]]:
    heads, problems = ledger.context.anchors.heads(ledger.context.identity)
    assert problems == []
    return heads


def test_outside_a_group_a_record_syncs_its_bytes_then_its_folder(tmp_path, synced):
    atomic_write_json(tmp_path / "a.json", {"a": 1})
    assert len(synced) == 2
    assert Path(synced[0]).name.startswith(".a.json.")  # the bytes, before the rename
    assert synced[1] == str(tmp_path)


def test_a_group_syncs_ledger_then_records_then_folders_then_anchors(tmp_path, synced, monkeypatch):
    ledger = anchored_ledger(tmp_path / "ring")
    ledger.append("before")
    del synced[:]
    anchors = ledger.context.anchors
    real_anchor = type(anchors).anchor_head
    order: list[str] = []

    def anchor_head(self, identity, ring_dir, seq, digest):
        order.append(f"anchor {seq} after {len(synced)} syncs")
        real_anchor(self, identity, ring_dir, seq, digest)

    monkeypatch.setattr(type(anchors), "anchor_head", anchor_head)
    root = ledger.path.parent
    with group_commit():
        assert grouped()
        for name in ("x", "y"):
            write_record(root, root / "nodes" / name / "node.json", {"name": name})
        ledger.append("after", n=2)
        assert synced == [] and order == []  # nothing synced or anchored inside the group
    assert not grouped()
    assert synced[:2] == [str(ledger.path), str(root)]  # the ledger's lines first
    assert synced[2:4] == [str(root / "nodes" / n / "node.json") for n in ("x", "y")]
    assert synced[4:] == [str(root / "nodes" / n) for n in ("x", "y")]
    # One anchor for the whole group: the ledger's last head, once every line was synced.
    assert order == [f"anchor 4 after {len(synced)} syncs"]
    assert store_heads(ledger)[-1] == (4, ledger.records()[-1]["hash"])
    assert ledger.verify(ledger_anchors(RingLayout(root))) == []
    assert record_problems(root) == []


def test_a_group_inside_a_group_joins_it(tmp_path, synced):
    with group_commit():
        with group_commit():
            atomic_write_json(tmp_path / "inner.json", {})
        assert synced == []  # the inner group's end is not the outer's
        atomic_write_json(tmp_path / "outer.json", {})
    assert synced == [str(tmp_path / "inner.json"), str(tmp_path / "outer.json"), str(tmp_path)]


def test_a_failing_group_still_syncs_what_it_wrote(tmp_path, synced):
    ledger = anchored_ledger(tmp_path / "ring")
    with pytest.raises(RuntimeError, match="cut"), group_commit():
        ledger.append("written")
        raise RuntimeError("cut")
    assert str(ledger.path) in synced
    assert store_heads(ledger) == [(1, ledger.records()[-1]["hash"])]


def test_a_file_removed_inside_a_group_is_passed_over(tmp_path, synced):
    with group_commit():
        atomic_write_json(tmp_path / "gone.json", {})
        os.unlink(tmp_path / "gone.json")
        atomic_write_json(tmp_path / "kept.json", {})
    assert synced == [str(tmp_path / "kept.json"), str(tmp_path)]
