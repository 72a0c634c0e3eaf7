"""A store that catches what it replays (docs/integrity.md#replays): a flipped bit with
size, mtime and inode restored is never replayed; an index entry is checked against the
registration the store's anchors recorded, and `store repair` restores it from them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from test_store import KEY, LIMIT, OTHER_KEY, PATHS, TREE, WHO, train

from ringflow.core.errors import ReplayCheckFailed
from ringflow.core.state import Ring
from ringflow.weights import store as store_module
from ringflow.weights.heal import check_store, check_store_index, repair_store
from ringflow.weights.store import WeightsStore
from ringtools import full_config


@pytest.fixture
def store(tmp_path) -> WeightsStore:
    return WeightsStore(tmp_path / "store")


@pytest.fixture
def two_keys(store, tmp_path) -> tuple[dict, dict]:
    first, _ = store.register(TREE, KEY, train(tmp_path / "t1"), PATHS, WHO, LIMIT)
    second, _ = store.register(TREE, OTHER_KEY, train(tmp_path / "t2", model=b"other" * 99),
                               PATHS, {**WHO, "node": "n4"}, LIMIT)  # fmt: skip
    return first, second


@pytest.fixture
def hashes(monkeypatch) -> list[str]:
    """The paths the store hashes, in order."""
    seen: list[str] = []
    real = store_module.sha256_file

    def counting(path):
        seen.append(Path(path).name)
        return real(path)

    monkeypatch.setattr(store_module, "sha256_file", counting)
    return seen


def model_object(store: WeightsStore, entry: dict) -> Path:
    (item,) = [f for f in entry["files"] if f["path"] == "weights/model.pt"]
    return store.objects / item["sha256"]


def flip_a_bit_keeping_stat(path: Path) -> None:
    """Flip one bit in place; restore size, mtime and inode (the ctime moves: no user can
    set it back)."""
    before = path.stat()
    os.chmod(path, 0o644)
    with open(path, "r+b") as handle:
        byte = handle.read(1)
        handle.seek(0)
        handle.write(bytes([byte[0] ^ 1]))
    os.chmod(path, 0o444)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (
        before.st_size,
        before.st_mtime_ns,
        before.st_ino,
    )


def test_a_replay_after_replays_and_released_links_hashes_nothing(store, two_keys, tmp_path,
                                                                  hashes):  # fmt: skip
    entry, _ = two_keys
    for number in range(3):
        work = tmp_path / f"replay-{number}"
        assert store.replay_into(entry, work) == "hardlink"
        assert sorted(store.release_links(work)) == sorted(PATHS)
    # Each link and unlink moved the objects' ctime; ringflow re-recorded it each time.
    assert hashes == []


def test_a_flipped_bit_with_size_mtime_and_inode_kept_is_not_replayed(store, two_keys,
                                                                      tmp_path):  # fmt: skip
    entry, _ = two_keys
    work = tmp_path / "first"
    store.replay_into(entry, work)
    store.release_links(work)
    obj = model_object(store, entry)
    flip_a_bit_keeping_stat(obj)
    for number in range(2):
        with pytest.raises(ReplayCheckFailed, match="does not match its registered sha256"):
            store.replay_into(entry, tmp_path / f"replay-{number}")
        assert not (tmp_path / f"replay-{number}" / "weights" / "model.pt").exists()
    report = check_store(store)
    (damage,) = report.damaged
    assert damage.key == KEY and "was altered" in damage.reason


def test_a_guard_replay_hashes_whatever_the_mode(store, two_keys, tmp_path, hashes):
    entry, _ = two_keys
    store.replay_into(entry, tmp_path / "g0", verify="full")
    assert sorted(hashes) == sorted(f["sha256"] for f in entry["files"])


def point_at_other_object(store: WeightsStore, entry: dict, other: dict) -> Path:
    path = store.per_view / TREE / f"{KEY}.json"
    os.chmod(path, 0o644)
    path.write_text(json.dumps({**entry, "files": other["files"]}))
    return path


def test_an_entry_pointing_at_another_valid_object_is_damage_and_repaired(store, two_keys,
                                                                         tmp_path):  # fmt: skip
    entry, other = two_keys
    point_at_other_object(store, entry, other)
    assert store.verify() == []  # every object is intact: only the anchors tell
    with pytest.raises(ReplayCheckFailed, match="lists other objects than its registration"):
        store.replay_entry(TREE, KEY)
    report = check_store(store)
    (damage,) = report.damaged
    assert damage.key == KEY and "other objects than its registration anchored" in damage.reason
    # `ringflow verify` of every ring on the store says so too.
    (problem,) = check_store_index(store, {})
    assert f"damaged: key {KEY}" in problem
    done = repair_store(store, report)
    assert [r["key"] for r in done["restored"]] == [KEY] and done["quarantined"] == []
    assert check_store(store).problems == []
    restored = store.replay_entry(TREE, KEY)
    assert [(f["path"], f["sha256"]) for f in restored["files"]] == [
        (f["path"], f["sha256"]) for f in entry["files"]
    ]
    store.replay_into(restored, tmp_path / "replay")
    model = (tmp_path / "replay" / "weights" / "model.pt").read_bytes()
    assert model == (tmp_path / "t1" / "weights" / "model.pt").read_bytes()
    # The wrong entry is kept, not deleted.
    assert list((store.root / "quarantine").glob(f"*/per_view/{TREE}/{KEY}.json"))


def test_a_deleted_entry_is_damage_never_a_silent_retrain_and_repaired(store, two_keys):
    (store.per_view / TREE / f"{KEY}.json").unlink()
    assert store.entry(TREE, KEY) is None
    with pytest.raises(ReplayCheckFailed, match="is missing, but the store's anchors record"):
        store.replay_entry(TREE, KEY)
    report = check_store(store)
    (damage,) = report.damaged
    assert damage.key == KEY and "index entry missing" in damage.reason
    assert any(KEY in p for p in report.problems)
    done = repair_store(store, report)
    assert [r["key"] for r in done["restored"]] == [KEY]
    assert store.replay_entry(TREE, KEY)["files"] and check_store(store).problems == []


def test_a_deleted_entry_whose_objects_are_gone_names_who_must_retrain(store, two_keys):
    entry, _ = two_keys
    (store.per_view / TREE / f"{KEY}.json").unlink()
    model_object(store, entry).unlink()
    report = check_store(store)
    done = repair_store(store, report)
    assert done["restored"] == []
    assert done["retrain"] == [{"key": KEY, **WHO}]
    # The registration is closed in the anchors: the key trains once more, reported.
    assert store.replay_entry(TREE, KEY) is None
    assert check_store(store).problems == []


def test_an_interrupted_registration_anchored_before_its_entry_is_restored(store, tmp_path):
    store.register(TREE, KEY, train(tmp_path / "t1"), PATHS, WHO, LIMIT)
    # What a kill between the anchor and the index entry leaves.
    (store.per_view / TREE / f"{KEY}.json").unlink()
    done = repair_store(store, check_store(store))
    assert [r["key"] for r in done["restored"]] == [KEY]
    assert store.entry(TREE, KEY)["who"] == WHO


def settle(tmp_path: Path, store: WeightsStore, variant: str) -> tuple[str, str]:
    """The weights an execution of `variant` settles on, against a registered key."""
    from contextlib import ExitStack

    from ringflow.core.layout import RingLayout
    from ringflow.execute import Execution, _settle_weights

    ring = Ring.from_record(
        {
            "ring_id": "ring",
            "ring_dir": str(tmp_path / "ring"),
            "config": full_config(replay_verify="stat", max_train_attempts=2),
        }
    )
    ex = Execution(ring, RingLayout(tmp_path / "ring"), {"id": "n1", "tree_hash": TREE},
                   "proxy", variant, {"weights": "key", "key": KEY}, tmp_path / variant,
                   lambda: float("inf"))  # fmt: skip
    ex.box = tmp_path / f"box-{variant}"
    with ExitStack() as lock:
        return _settle_weights(ex, store, lock)


def test_an_execution_hashes_guard_replays_and_refuses_a_lost_entry(store, two_keys, tmp_path,
                                                                    hashes):  # fmt: skip
    entry, _ = two_keys
    assert settle(tmp_path, store, "s1") == ("replay", "hardlink")
    assert hashes == []  # stat mode, the object unchanged since registration
    assert settle(tmp_path, store, "g7") == ("replay", "hardlink")
    assert sorted(hashes) == sorted(f["sha256"] for f in entry["files"])
    (store.per_view / TREE / f"{KEY}.json").unlink()
    with pytest.raises(ReplayCheckFailed, match="is missing, but the store's anchors"):
        settle(tmp_path, store, "s2")  # never a silent retrain
