"""File, view and tree hashes, and the memo that makes a second hash cost a stat."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from ringflow.core.errors import InputError
from ringflow.core.hashing import (
    HashMemo,
    hash_files,
    listing,
    listing_hash,
    sha256_file,
    solution_tree_hash,
    view_content_hash,
)

SRC = Path(__file__).resolve().parents[3] / "src"
ONE_HOUR_NS = 3600 * 10**9


def write(path: Path, data: bytes, age_ns: int = ONE_HOUR_NS) -> Path:
    """Write a file whose mtime lies in the past, as for data that has settled."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - age_ns))
    return path


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def overwrite_keeping_stat(path: Path, data: bytes) -> None:
    """Change content, keeping size, mtime_ns and inode: only a reread could notice."""
    before = path.stat()
    assert len(data) == before.st_size
    with open(path, "r+b") as handle:
        handle.write(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_ino == before.st_ino


def test_sha256_file_matches_hashlib_across_chunks(tmp_path):
    data = os.urandom((1 << 20) * 2 + 123)
    assert sha256_file(write(tmp_path / "f", data)) == sha(data)
    assert sha256_file(write(tmp_path / "empty", b"")) == sha(b"")


def test_memo_second_hash_does_not_reread(tmp_path):
    path = write(tmp_path / "a.bin", b"A" * 4096)
    memo_path = tmp_path / "memo.json"
    first = hash_files([path], memo=HashMemo(memo_path))
    assert first == {str(path): sha(b"A" * 4096)}

    # A fresh memo object loads what the first one saved and trusts an unchanged stat.
    memo = HashMemo(memo_path)
    assert memo.lookup(path, path.stat()) == sha(b"A" * 4096)

    # An in-place rewrite that keeps size and inode and restores the mtime (`cp -p`,
    # `rsync --inplace -t`) still moves ctime: the memo does not give the old hash.
    overwrite_keeping_stat(path, b"B" * 4096)
    assert hash_files([path], memo=HashMemo(memo_path))[str(path)] == sha(b"B" * 4096)


def test_memo_does_not_trust_a_file_changed_this_instant(tmp_path):
    path = tmp_path / "fresh.bin"
    path.write_bytes(b"x" * 100)
    memo = HashMemo(tmp_path / "memo.json")
    hash_files([path], memo=memo)
    # Its mtime is within the clock's racy window: a same-tick rewrite could hide.
    assert memo.lookup(path, path.stat()) is None


def test_memo_lookup_needs_size_mtime_ctime_and_inode(tmp_path):
    path = write(tmp_path / "a", b"12345")
    memo = HashMemo(tmp_path / "memo.json")
    st = path.stat()
    memo.remember(path, st, "f" * 64)
    assert memo.lookup(path, st) == "f" * 64
    same = {"st_size": st.st_size, "st_mtime_ns": st.st_mtime_ns,
            "st_ctime_ns": st.st_ctime_ns, "st_ino": st.st_ino}  # fmt: skip
    for field in same:
        changed = SimpleNamespace(**{**same, field: same[field] + 1})
        assert memo.lookup(path, changed) is None, field


def test_memo_save_merges_concurrent_processes(tmp_path):
    memo_path = tmp_path / "memo.json"
    files = [write(tmp_path / f"f{i}", bytes([i]) * 10) for i in range(6)]
    script = textwrap.dedent(
        """
        import sys
        from ringflow.core.hashing import HashMemo, hash_files
        memo = HashMemo(sys.argv[1])
        hash_files(sys.argv[2:], memo=memo)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(memo_path), *map(str, files[i::2])], env=env
        )
        for i in range(2)
    ]
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    saved = json.loads(memo_path.read_text())
    assert sorted(saved) == sorted(os.path.abspath(f) for f in files)


def test_unreadable_memo_is_rebuilt(tmp_path):
    memo_path = tmp_path / "memo.json"
    memo_path.write_text("{not json")
    path = write(tmp_path / "a", b"abc")
    assert hash_files([path], memo=HashMemo(memo_path))[str(path)] == sha(b"abc")
    assert os.path.abspath(path) in json.loads(memo_path.read_text())


def test_missing_file_is_named(tmp_path):
    with pytest.raises(InputError, match="nope"):
        hash_files([tmp_path / "nope"], memo=HashMemo(tmp_path / "m.json"))


def make_view(root: Path) -> Path:
    write(root / "inputs" / "x.npy", b"inputs-x")
    write(root / "inputs" / "sub" / "y.csv", b"1,2,3\n")
    write(root / "labels" / "y.npy", b"labels")
    return root


def test_view_hash_covers_inputs_and_labels_only(tmp_path):
    view = make_view(tmp_path / "view")
    digest, entries = view_content_hash(view)
    assert [e["path"] for e in entries] == ["inputs/sub/y.csv", "inputs/x.npy", "labels/y.npy"]
    assert entries[1] == {"path": "inputs/x.npy", "size": 8, "sha256": sha(b"inputs-x")}
    assert digest == listing_hash(entries)

    write(view / "manifest.json", b"{}")
    assert view_content_hash(view)[0] == digest

    write(view / "labels" / "y.npy", b"LABELS")
    assert view_content_hash(view)[0] != digest


def test_view_hash_changes_with_a_rename(tmp_path):
    view = make_view(tmp_path / "view")
    digest, _ = view_content_hash(view)
    os.rename(view / "inputs" / "x.npy", view / "inputs" / "z.npy")
    assert view_content_hash(view)[0] != digest


def test_view_hash_with_memo_matches_without(tmp_path):
    view = make_view(tmp_path / "view")
    memo = HashMemo(tmp_path / "memo.json")
    assert view_content_hash(view, memo)[0] == view_content_hash(view)[0]
    assert len(memo) == 3
    assert view_content_hash(view, memo)[0] == view_content_hash(view)[0]


def test_view_without_labels_is_refused(tmp_path):
    write(tmp_path / "v" / "inputs" / "a", b"a")
    with pytest.raises(InputError, match="labels"):
        view_content_hash(tmp_path / "v")


def test_listing_refuses_symlinks_unless_excluded(tmp_path):
    write(tmp_path / "t" / "a.py", b"print(1)")
    os.symlink("a.py", tmp_path / "t" / "link.py")
    with pytest.raises(InputError, match=r"link\.py"):
        listing(tmp_path / "t")
    entries = listing(tmp_path / "t", exclude=lambda rel: rel == "link.py")
    assert [e["path"] for e in entries] == ["a.py"]


def make_solution(root: Path) -> Path:
    write(root / "run.py", b"print('hi')\n")
    write(root / "lib" / "model.py", b"W = 1\n")
    write(root / "ARTIFACTS.json", b"[]")
    return root


def test_tree_hash_ignores_progress_per_view_files_and_caches(tmp_path):
    solution = make_solution(tmp_path / "solution")
    per_view = {"weights/model.pt"}
    digest, entries = solution_tree_hash(solution, per_view)
    assert [e["path"] for e in entries] == ["ARTIFACTS.json", "lib/model.py", "run.py"]

    write(solution / "progress.json", b'{"epoch": 3}')
    write(solution / "weights" / "model.pt", b"trained weights")
    write(solution / "__pycache__" / "run.cpython-311.pyc", b"\x00")
    write(solution / "lib" / "__pycache__" / "model.cpython-311.pyc", b"\x00")
    write(solution / "lib" / "stray.pyc", b"\x00")
    write(solution / ".ipynb_checkpoints" / "nb.ipynb", b"{}")
    write(solution / ".git" / "HEAD", b"ref")
    # A link inside a cache folder is never looked at.
    os.symlink("/etc/passwd", solution / "__pycache__" / "link")
    assert solution_tree_hash(solution, per_view)[0] == digest


def test_tree_hash_changes_when_a_source_file_changes(tmp_path):
    solution = make_solution(tmp_path / "solution")
    digest, _ = solution_tree_hash(solution, set())
    write(solution / "lib" / "model.py", b"W = 2\n")
    assert solution_tree_hash(solution, set())[0] != digest


def test_tree_hash_counts_undeclared_weights(tmp_path):
    solution = make_solution(tmp_path / "solution")
    digest, _ = solution_tree_hash(solution, {"weights/model.pt"})
    write(solution / "weights" / "other.pt", b"not declared per-view")
    assert solution_tree_hash(solution, {"weights/model.pt"})[0] != digest
    # A declared per-view folder excludes everything under it.
    assert solution_tree_hash(solution, {"weights"})[0] == digest


def test_a_pool_hashes_only_what_is_worth_its_threads(tmp_path, monkeypatch):
    import concurrent.futures

    import ringflow.core.hashing as hashing

    pools = []

    class Recorded(concurrent.futures.ThreadPoolExecutor):
        def __init__(self, *args, **kwargs):
            pools.append(kwargs.get("max_workers"))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(concurrent.futures, "ThreadPoolExecutor", Recorded)
    paths = [write(tmp_path / f"f{i}", bytes([i]) * 3000) for i in range(3)]
    expected = {str(p): sha(p.read_bytes()) for p in paths}
    assert hash_files(paths, workers=2) == expected
    assert pools == []  # 9 kB: hashed one after another
    monkeypatch.setattr(hashing, "POOL_MIN_BYTES", 9000)
    assert hash_files(paths, workers=2) == expected
    assert pools == [2]
