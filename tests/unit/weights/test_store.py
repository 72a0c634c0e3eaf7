"""The weights store on real files, with real locks held by real processes."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ringflow.core.errors import AcceptanceError, DeadlineReached, ReplayCheckFailed, StoreError
from ringflow.weights.store import WeightsStore

SRC = Path(__file__).resolve().parents[3] / "src"
TREE = hashlib.sha256(b"tree").hexdigest()
KEY = hashlib.sha256(b"key").hexdigest()
OTHER_KEY = hashlib.sha256(b"other key").hexdigest()
WHO = {"ring": "r1", "node": "n3", "execution": "proxy/seed0"}
LIMIT = 10**6
PATHS = ["weights/model.pt", "weights/extra/scaler.json"]


def train(work: Path, model: bytes = b"model-bytes" * 100, scaler: bytes = b'{"m": 1}') -> Path:
    """What a training execution leaves in its weights folder."""
    (work / "weights" / "extra").mkdir(parents=True, exist_ok=True)
    (work / "weights" / "model.pt").write_bytes(model)
    (work / "weights" / "extra" / "scaler.json").write_bytes(scaler)
    return work


@pytest.fixture
def store(tmp_path) -> WeightsStore:
    return WeightsStore(tmp_path / "store")


@pytest.fixture
def registered(store, tmp_path) -> dict:
    entry, created = store.register(TREE, KEY, train(tmp_path / "trainer"), PATHS, WHO, LIMIT)
    assert created
    return entry


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def alter_one_byte(path: Path, keep_mtime: bool) -> None:
    before = path.stat()
    os.chmod(path, 0o644)
    with open(path, "r+b") as handle:
        first = handle.read(1)
        handle.seek(0)
        handle.write(bytes([first[0] ^ 0xFF]))
    os.chmod(path, 0o444)
    if keep_mtime:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_ino) == (before.st_size, before.st_ino)
    assert (after.st_mtime_ns == before.st_mtime_ns) == keep_mtime


def test_store_root_is_private_and_objects_read_only(store, registered):
    assert mode_of(store.root) == 0o700
    for item in registered["files"]:
        assert mode_of(store.objects / item["sha256"]) == 0o444


def test_register_records_files_and_who(store, registered, tmp_path):
    assert registered["key"] == KEY and registered["tree"] == TREE
    assert registered["who"] == WHO
    by_path = {item["path"]: item for item in registered["files"]}
    assert sorted(by_path) == sorted(PATHS)
    model = by_path["weights/model.pt"]
    data = (tmp_path / "trainer" / "weights" / "model.pt").read_bytes()
    assert model["sha256"] == hashlib.sha256(data).hexdigest()
    assert model["size"] == len(data)
    st = (store.objects / model["sha256"]).stat()
    assert (model["mtime_ns"], model["inode"]) == (st.st_mtime_ns, st.st_ino)
    assert store.entry(TREE, KEY) == registered
    assert store.find(KEY) == registered
    assert store.entry(TREE, OTHER_KEY) is None and store.find(OTHER_KEY) is None
    assert store.verify() == []


def test_replay_hardlinks_read_only(store, registered, tmp_path):
    dest = tmp_path / "replayer"
    assert store.replay_into(registered, dest) == "hardlink"
    for item in registered["files"]:
        placed = dest / item["path"]
        assert not placed.is_symlink()
        assert placed.stat().st_ino == (store.objects / item["sha256"]).stat().st_ino
        assert mode_of(placed) == 0o444
        assert placed.read_bytes() == (tmp_path / "trainer" / item["path"]).read_bytes()


def test_replay_replaces_what_is_there_without_following_links(store, registered, tmp_path):
    dest = tmp_path / "replayer"
    (dest / "weights" / "extra").mkdir(parents=True)
    (dest / "weights" / "model.pt").write_bytes(b"stale")
    outside = tmp_path / "outside.json"
    outside.write_bytes(b"untouched")
    os.symlink(outside, dest / "weights" / "extra" / "scaler.json")
    store.replay_into(registered, dest)
    assert (dest / "weights" / "model.pt").read_bytes() != b"stale"
    assert not (dest / "weights" / "extra" / "scaler.json").is_symlink()
    assert outside.read_bytes() == b"untouched"


def test_replay_copies_across_filesystems(store, registered, tmp_path):
    shm = Path("/dev/shm")
    if not shm.is_dir() or shm.stat().st_dev == store.objects.stat().st_dev:
        pytest.skip("no second filesystem to replay into")
    dest = shm / f"ringflow-test-{os.getpid()}-{time.monotonic_ns()}"
    try:
        assert store.replay_into(registered, dest) == "copy"
        for item in registered["files"]:
            assert mode_of(dest / item["path"]) == 0o444
            data = (dest / item["path"]).read_bytes()
            assert hashlib.sha256(data).hexdigest() == item["sha256"]
    finally:
        subprocess.run(["rm", "-rf", str(dest)], check=True)


def test_first_writer_wins(store, registered, tmp_path):
    late = train(tmp_path / "late", model=b"different weights")
    objects_before = sorted(os.listdir(store.objects))
    entry, created = store.register(TREE, KEY, late, PATHS, {**WHO, "node": "n9"}, LIMIT)
    assert not created
    assert entry == registered
    assert sorted(os.listdir(store.objects)) == objects_before


def test_same_content_under_two_keys_shares_one_object(store, registered, tmp_path):
    entry, created = store.register(TREE, OTHER_KEY, train(tmp_path / "again"), PATHS, WHO, LIMIT)
    assert created
    assert [f["sha256"] for f in entry["files"]] == [f["sha256"] for f in registered["files"]]
    assert len(os.listdir(store.objects)) == len(PATHS)


def test_a_damaged_object_is_replaced_when_registered_again(store, registered, tmp_path):
    model = next(f for f in registered["files"] if f["path"] == "weights/model.pt")
    alter_one_byte(store.objects / model["sha256"], keep_mtime=True)
    entry, _ = store.register(TREE, OTHER_KEY, train(tmp_path / "again"), PATHS, WHO, LIMIT)
    store.replay_into(entry, tmp_path / "replayer", verify="full")


def test_deleted_object_fails_replay_and_verify(store, registered, tmp_path):
    model = next(f for f in registered["files"] if f["path"] == "weights/model.pt")
    (store.objects / model["sha256"]).unlink()
    dest = tmp_path / "replayer"
    with pytest.raises(ReplayCheckFailed, match=r"weights/model\.pt") as caught:
        store.replay_into(registered, dest)
    assert caught.value.path == "weights/model.pt"
    assert "missing" in caught.value.reason
    # Nothing is placed when any file fails the check.
    assert not (dest / "weights" / "extra" / "scaler.json").exists()
    problems = store.verify()
    assert len(problems) == 1
    assert "weights/model.pt" in problems[0] and "missing" in problems[0]


def test_altered_object_with_new_mtime_fails_stat_replay(store, registered, tmp_path):
    model = next(f for f in registered["files"] if f["path"] == "weights/model.pt")
    time.sleep(0.05)  # past the filesystem clock's tick, so the write moves mtime
    alter_one_byte(store.objects / model["sha256"], keep_mtime=False)
    with pytest.raises(ReplayCheckFailed, match=r"weights/model\.pt") as caught:
        store.replay_into(registered, tmp_path / "replayer")
    assert "sha256" in caught.value.reason
    problems = store.verify()
    assert len(problems) == 1 and "weights/model.pt" in problems[0]


def test_altered_object_keeping_stat_is_caught_by_full_checks(store, registered, tmp_path):
    model = next(f for f in registered["files"] if f["path"] == "weights/model.pt")
    alter_one_byte(store.objects / model["sha256"], keep_mtime=True)
    with pytest.raises(ReplayCheckFailed, match=r"weights/model\.pt"):
        store.replay_into(registered, tmp_path / "replayer", verify="full")
    problems = store.verify()
    assert len(problems) == 1 and "altered" in problems[0]


def test_replaced_object_with_same_content_still_replays(store, registered, tmp_path):
    model = next(f for f in registered["files"] if f["path"] == "weights/model.pt")
    obj = store.objects / model["sha256"]
    copy = tmp_path / "copy"
    copy.write_bytes(obj.read_bytes())
    os.replace(copy, obj)
    assert obj.stat().st_ino != model["inode"]
    assert store.replay_into(registered, tmp_path / "replayer") == "hardlink"


def test_malformed_index_is_reported(store, registered):
    index = store.per_view / TREE / f"{KEY}.json"
    os.chmod(index, 0o644)
    index.write_text("{broken")
    assert any("malformed" in p for p in store.verify())
    with pytest.raises(StoreError, match="malformed"):
        store.entry(TREE, KEY)


def accept_fault(store: WeightsStore, work: Path, paths: list[str], limit: int = LIMIT) -> str:
    with pytest.raises(AcceptanceError) as caught:
        store.accept(work, paths, limit)
    return str(caught.value)


def test_accept_returns_sizes(store, tmp_path):
    work = train(tmp_path / "w")
    accepted = store.accept(work, PATHS, LIMIT)
    assert accepted == [
        {"path": p, "size": (work / p).stat().st_size} for p in ["weights/model.pt", PATHS[1]]
    ]


def test_accept_refuses_missing_file(store, tmp_path):
    work = train(tmp_path / "w")
    message = accept_fault(store, work, [*PATHS, "weights/absent.pt"])
    assert "weights/absent.pt does not exist" in message


def test_accept_refuses_symlink(store, tmp_path):
    work = train(tmp_path / "w")
    os.symlink("model.pt", work / "weights" / "link.pt")
    assert "weights/link.pt is a symbolic link" in accept_fault(store, work, ["weights/link.pt"])


def test_accept_refuses_file_under_linked_folder(store, tmp_path):
    work = train(tmp_path / "w")
    os.symlink(work / "weights", work / "alias")
    message = accept_fault(store, work, ["alias/model.pt"])
    assert "alias/model.pt lies under a symbolic link" in message


def test_accept_refuses_oversize(store, tmp_path):
    work = train(tmp_path / "w")
    size = (work / "weights" / "model.pt").stat().st_size
    message = accept_fault(store, work, PATHS, limit=size - 1)
    assert f"weights/model.pt is {size} bytes, over the size limit of {size - 1}" in message


@pytest.mark.parametrize("bad", ["/etc/passwd", "../escape.pt", "weights/../../x"])
def test_accept_refuses_paths_outside(store, tmp_path, bad):
    assert repr(bad) in accept_fault(store, train(tmp_path / "w"), [bad])


def test_register_refuses_unaccepted_weights_and_writes_nothing(store, tmp_path):
    work = train(tmp_path / "w")
    with pytest.raises(AcceptanceError, match=r"weights/none\.pt"):
        store.register(TREE, KEY, work, ["weights/none.pt"], WHO, LIMIT)
    assert store.entry(TREE, KEY) is None
    assert os.listdir(store.objects) == []


def test_make_private_breaks_the_hardlink(store, registered, tmp_path):
    dest = tmp_path / "exec"
    store.replay_into(registered, dest)
    (dest / "weights" / "notes.txt").write_text("mine")
    copied = store.make_private(dest, ["weights"])
    assert sorted(copied) == sorted(PATHS)
    for item in registered["files"]:
        placed = dest / item["path"]
        obj = store.objects / item["sha256"]
        assert placed.stat().st_ino != obj.stat().st_ino
        assert placed.stat().st_mode & stat.S_IWUSR
        placed.write_bytes(b"retrained")
        assert hashlib.sha256(obj.read_bytes()).hexdigest() == item["sha256"]
    assert (dest / "weights" / "notes.txt").read_text() == "mine"
    assert store.verify() == []


def test_make_private_leaves_unrelated_hardlinks(store, registered, tmp_path):
    dest = tmp_path / "exec"
    (dest / "weights").mkdir(parents=True)
    (tmp_path / "shared.bin").write_bytes(b"data")
    os.link(tmp_path / "shared.bin", dest / "weights" / "model.pt")
    assert store.make_private(dest, ["weights/model.pt", "weights/absent.pt"]) == []
    assert (dest / "weights" / "model.pt").stat().st_ino == (tmp_path / "shared.bin").stat().st_ino


RACER = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path
    from ringflow.weights.store import WeightsStore

    root, tree, key, work, go, name = sys.argv[1:]
    store = WeightsStore(root)
    while not os.path.exists(go):
        time.sleep(0.001)
    with store.key_lock(key):
        entry = store.entry(tree, key)
        if entry is None:
            weights = Path(work) / "weights"
            weights.mkdir(parents=True)
            time.sleep(0.3)  # training takes a while; the other waits on the lock
            (weights / "model.pt").write_bytes(name.encode() * 1000)
            entry, created = store.register(
                tree, key, work, ["weights/model.pt"],
                {"ring": "r1", "node": name, "execution": "x"}, 10**6,
            )
            print(json.dumps({"mode": "train", "created": created}))
        else:
            how = store.replay_into(entry, work)
            content = (Path(work) / "weights" / "model.pt").read_bytes().decode()
            print(json.dumps({"mode": "replay", "how": how, "content": content[:10]}))
    """
)


def run_python(script: str, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.Popen(
        [sys.executable, "-c", script, *args], env=env, stdout=subprocess.PIPE, text=True
    )


def race_ends(racers: list[subprocess.Popen], timeout: float) -> tuple[dict, dict]:
    """(the trainer's, the replayer's) last output line, once both RACERs have ended: one
    trained the key, the other replayed its weights by hard link."""
    outcomes = []
    for racer in racers:
        out, _ = racer.communicate(timeout=timeout)
        assert racer.returncode == 0
        outcomes.append(json.loads(out.strip().splitlines()[-1]))
    assert sorted(o["mode"] for o in outcomes) == ["replay", "train"]
    trainer = next(o for o in outcomes if o["mode"] == "train")
    replayer = next(o for o in outcomes if o["mode"] == "replay")
    assert replayer["how"] == "hardlink"
    return trainer, replayer


def test_concurrent_first_runs_train_once_and_replay(store, tmp_path):
    go = tmp_path / "go"
    racers = [
        run_python(RACER, str(store.root), TREE, KEY, str(tmp_path / name), str(go), name)
        for name in ("alpha", "bravo")
    ]
    time.sleep(0.5)  # both interpreters started and polling for the signal
    go.touch()
    trainer, replayer = race_ends(racers, timeout=60)
    assert trainer["created"] is True
    assert replayer["content"] == store.entry(TREE, KEY)["who"]["node"] * 2


HOLDER = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from ringflow.weights.store import WeightsStore

    root, key, held, release = sys.argv[1:]
    with WeightsStore(root).key_lock(key):
        Path(held).touch()
        deadline = time.monotonic() + 30
        while not os.path.exists(release) and time.monotonic() < deadline:
            time.sleep(0.01)
    """
)


def test_key_lock_wait_ends_when_the_deadline_moves(store, tmp_path):
    held, release = tmp_path / "held", tmp_path / "release"
    holder = run_python(HOLDER, str(store.root), KEY, str(held), str(release))
    try:
        for _ in range(3000):
            if held.exists():
                break
            time.sleep(0.01)
        assert held.exists()
        start = time.monotonic()
        moved_at = start + 0.5

        def should_stop() -> str | None:
            return "ring deadline moved to now" if time.monotonic() >= moved_at else None

        with (
            pytest.raises(DeadlineReached, match="deadline moved"),
            store.key_lock(KEY, should_stop=should_stop, poll_s=0.05),
        ):
            pytest.fail("the lock is held by another process")
        waited = time.monotonic() - start
        assert 0.5 <= waited < 3.0
    finally:
        release.touch()
        holder.wait(timeout=30)
    with store.key_lock(KEY, should_stop=lambda: None):
        pass
