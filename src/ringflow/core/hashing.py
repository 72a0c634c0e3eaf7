"""Content hashes of files and trees, with a memo so unchanged files cost a `stat`.

A view of several gigabytes is hashed once; later hashes compare each file's
(size, mtime_ns, ctime_ns, inode) with the memo and reuse the recorded sha256
(docs/contracts.md#weights). ctime_ns cannot be set back by a user, so an in-place rewrite that
restores the mtime (`cp -p`, `rsync --inplace -t`) is still seen.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath
from typing import Any

from .brief_lock import brief_lock
from .errors import InputError
from .jsonio import atomic_write_bytes, canonical_json, sha256_json

CHUNK_BYTES = 1 << 20
# Below this many bytes to hash, a thread pool costs more to start (a thread per core, a
# few hundred microseconds each) than hashing the files one after another.
POOL_MIN_BYTES = 8 << 20

# A file modified again within one tick of the filesystem clock can keep the
# same mtime_ns; trusting the memo for such a file could return a stale hash.
# Files changed this recently are hashed but not remembered (git's "racy" rule).
RACY_WINDOW_NS = 1_000_000_000

# Retries when a file changes while it is being read.
MAX_HASH_ATTEMPTS = 3

CACHE_DIR_NAMES = frozenset({"__pycache__", ".ipynb_checkpoints", ".git", ".pytest_cache"})
PROGRESS_FILE = "progress.json"

Exclude = Callable[[str], bool]

# A memo record: size, mtime_ns, ctime_ns, inode, sha256 (older shorter records are dropped).
MEMO_FIELDS = 5


def sha256_file(path: str | os.PathLike) -> str:
    """sha256 of a file's bytes, read in 1 MiB chunks (hashlib releases the GIL on each)."""
    digest = hashlib.sha256()
    buffer = bytearray(CHUNK_BYTES)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as handle:
        while True:
            count = handle.readinto(buffer)
            if not count:
                break
            digest.update(view[:count])
    return digest.hexdigest()


def _signature(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


class HashMemo:
    """Persistent memo {absolute path: [size, mtime_ns, ctime_ns, inode, sha256]} in one JSON file.

    Loaded once; `save()` merges this process's new entries into what is on
    disk under a file lock, so concurrent processes lose nothing.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._entries: dict[str, list] = self._read_disk()
        self._changed: dict[str, list] = {}

    def _read_disk(self) -> dict[str, list]:
        # The memo is only a cache: an unreadable one costs a rehash, never a wrong hash.
        try:
            data = json.loads(self.path.read_bytes())
        except (FileNotFoundError, ValueError):
            return {}
        if not isinstance(data, dict):
            return {}
        return {
            key: value
            for key, value in data.items()
            if isinstance(value, list) and len(value) == MEMO_FIELDS and isinstance(value[-1], str)
        }

    def lookup(self, path: str | os.PathLike, st: os.stat_result) -> str | None:
        """The remembered sha256 if size, mtime_ns, ctime_ns and inode still match; else None."""
        record = self._entries.get(os.path.abspath(path))
        if record is None or tuple(record[:-1]) != _signature(st):
            return None
        return record[-1]

    def remember(self, path: str | os.PathLike, st: os.stat_result, sha: str) -> None:
        """Record the hash of a file as it was when `st` was taken."""
        record = [*_signature(st), sha]
        key = os.path.abspath(path)
        self._entries[key] = record
        self._changed[key] = record

    def save(self) -> None:
        """Write the memo atomically, merged with entries other processes saved meanwhile."""
        if not self._changed:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with brief_lock(str(self.path) + ".lock"):
            merged = self._read_disk()
            merged.update(self._changed)
            atomic_write_bytes(self.path, canonical_json(merged))
        self._entries = merged
        self._changed = {}

    def __len__(self) -> int:
        return len(self._entries)


def _hash_stable(path: str) -> tuple[str, os.stat_result]:
    """Hash a file and return the stat it was hashed under; retries if it changes meanwhile."""
    for _ in range(MAX_HASH_ATTEMPTS):
        before = os.stat(path)
        sha = sha256_file(path)
        after = os.stat(path)
        if _signature(before) == _signature(after):
            return sha, after
    raise InputError(f"{path}: the file kept changing while it was being hashed")


def _is_settled(st: os.stat_result, now_ns: int) -> bool:
    return now_ns - st.st_mtime_ns > RACY_WINDOW_NS


def hash_files(
    paths: Iterable[str | os.PathLike],
    memo: HashMemo | None = None,
    workers: int | None = None,
) -> dict[str, str]:
    """sha256 of each file, keyed by the path as given.

    Files whose (size, mtime_ns, ctime_ns, inode) match the memo cost a stat only; the
    rest are hashed on a thread pool (one thread per core by default), and the
    memo is saved when it learned anything.
    """
    return {path: sha for path, (sha, _) in _hash_sized(paths, memo, workers).items()}


def _hash_sized(
    paths: Iterable[str | os.PathLike], memo: HashMemo | None, workers: int | None
) -> dict[str, tuple[str, int]]:
    """{path: (sha256, size)}: `hash_files` with the sizes it learned on the way."""
    result: dict[str, tuple[str, int]] = {}
    to_hash: list[str] = []
    to_hash_bytes = 0
    for raw in paths:
        path = os.fspath(raw)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            raise InputError(f"{path}: file not found") from None
        if memo is not None:
            sha = memo.lookup(path, st)
            if sha is not None:
                result[path] = (sha, st.st_size)
                continue
        to_hash.append(path)
        to_hash_bytes += st.st_size
    if not to_hash:
        return result

    def hash_one(path: str) -> tuple[str, str, os.stat_result]:
        try:
            sha, st = _hash_stable(path)
        except FileNotFoundError:
            raise InputError(f"{path}: file not found") from None
        return path, sha, st

    pool_size = max(1, min(workers or os.cpu_count() or 1, len(to_hash)))
    if pool_size == 1 or to_hash_bytes < POOL_MIN_BYTES:
        hashed = [hash_one(path) for path in to_hash]
    else:
        from concurrent.futures import ThreadPoolExecutor  # only when there is a pool

        with ThreadPoolExecutor(max_workers=pool_size, thread_name_prefix="sha256") as pool:
            hashed = list(pool.map(hash_one, to_hash))
    now_ns = time.time_ns()
    for path, sha, st in hashed:
        result[path] = (sha, st.st_size)
        if memo is not None and _is_settled(st, now_ns):
            memo.remember(path, st, sha)
    if memo is not None:
        memo.save()
    return result


def _walk_files(root: str, exclude: Exclude | None) -> list[tuple[str, str]]:
    """(relative posix path, absolute path) of every regular file under root, not following links.

    Folders are offered to `exclude` with a trailing slash, so a cache folder is skipped whole.
    """
    found: list[tuple[str, str]] = []
    pending = [("", root)]
    while pending:
        prefix, folder = pending.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                rel = prefix + entry.name
                if entry.is_dir(follow_symlinks=False):
                    if exclude is None or not exclude(rel + "/"):
                        pending.append((rel + "/", entry.path))
                    continue
                if exclude is not None and exclude(rel):
                    continue
                if entry.is_symlink():
                    raise InputError(f"{entry.path}: is a symbolic link; links are not hashed")
                if not entry.is_file(follow_symlinks=False):
                    raise InputError(f"{entry.path}: is not a regular file")
                found.append((rel, entry.path))
    return found


def listing(
    root: str | os.PathLike,
    exclude: Exclude | None = None,
    memo: HashMemo | None = None,
) -> list[dict[str, Any]]:
    """Sorted entries {"path", "size", "sha256"} of every regular file under root.

    `exclude(relpath)` skips a file (folders are offered as "relpath/");
    a symbolic link that is not excluded raises InputError naming it.
    """
    root = os.fspath(root)
    if not os.path.isdir(root):
        raise InputError(f"{root}: not a folder")
    files = sorted(_walk_files(root, exclude))
    hashed = _hash_sized([abs_path for _, abs_path in files], memo, None)
    return [
        {"path": rel, "size": hashed[abs_path][1], "sha256": hashed[abs_path][0]}
        for rel, abs_path in files
    ]


def listing_hash(entries: list[dict[str, Any]]) -> str:
    """sha256 of the canonical JSON of a listing (sorted paths, sizes, file hashes)."""
    ordered = sorted(
        ({"path": e["path"], "size": e["size"], "sha256": e["sha256"]} for e in entries),
        key=lambda e: e["path"],
    )
    return sha256_json(ordered)


VIEW_PARTS = ("inputs", "labels")


def view_content_hash(
    view_dir: str | os.PathLike, memo: HashMemo | None = None
) -> tuple[str, list[dict[str, Any]]]:
    """Content hash of a view over its `inputs/` and `labels/` folders, with the listing.

    Anything else in the view folder (such as its manifest) is not part of the
    content. The two folders themselves may be links to shared data; links
    inside them are refused.
    """
    view_dir = Path(view_dir)
    entries: list[dict[str, Any]] = []
    for part in VIEW_PARTS:
        if not (view_dir / part).is_dir():
            raise InputError(f"view {view_dir}: missing folder {part}/")
        for entry in listing(view_dir / part, memo=memo):
            entries.append({**entry, "path": f"{part}/{entry['path']}"})
    return listing_hash(entries), entries


def view_part_hashes(
    view_dir: str | os.PathLike, memo: HashMemo | None = None
) -> dict[str, tuple[str, list[dict[str, Any]]]]:
    """{part: (hash, listing)} of a view's `inputs/` and of its `labels/`, each on its own.

    A weights key takes the inputs hash only: the program never sees the labels, so a
    corrected label must not retrain anything; the labels hash belongs to the evaluation.
    """
    view_dir = Path(view_dir)
    hashes = {}
    for part in VIEW_PARTS:
        if not (view_dir / part).is_dir():
            raise InputError(f"view {view_dir}: missing folder {part}/")
        entries = listing(view_dir / part, memo=memo)
        hashes[part] = (listing_hash(entries), entries)
    return hashes


def is_cache(rel: str) -> bool:
    parts = rel.rstrip("/").split("/")
    if any(part in CACHE_DIR_NAMES for part in parts):
        return True
    return not rel.endswith("/") and rel.endswith(".pyc")


def _normalise_rel(path: str) -> str:
    return Path(path).as_posix().strip("/")


def tree_ignored(rel: str, patterns: Iterable[str]) -> bool:
    """Whether a solution path matches a `tree_ignore` pattern (matched from the right, like
    `PurePosixPath.match`: `METHOD.md`, `*.md`, `docs`)."""
    bare = PurePosixPath(rel.rstrip("/"))
    return any(bare.match(pattern.strip("/")) for pattern in patterns)


def drop_ignored(root: str | os.PathLike, patterns: Iterable[str]) -> list[str]:
    """Remove what `tree_ignore` leaves out of the hash from a working copy: the program
    cannot read what the key does not cover."""
    patterns = list(patterns)
    removed = []
    if not patterns:
        return removed
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = Path(dirpath).relative_to(root)
        for name in list(dirnames):
            if tree_ignored((rel_dir / name).as_posix() + "/", patterns):
                shutil.rmtree(Path(dirpath) / name)
                dirnames.remove(name)
                removed.append((rel_dir / name).as_posix() + "/")
        for name in filenames:
            if tree_ignored((rel_dir / name).as_posix(), patterns):
                (Path(dirpath) / name).unlink()
                removed.append((rel_dir / name).as_posix())
    return removed


def solution_tree_hash(
    solution_dir: str | os.PathLike, per_view_paths: set[str], ignore: Iterable[str] = ()
) -> tuple[str, list[dict[str, Any]]]:
    """Hash of a `solution/` tree without per-view weights, `progress.json` and caches.

    A per-view path names a file, or a folder whose whole content is per-view. `ignore`
    holds the ring's `tree_ignore` patterns (documentation the program cannot read); by
    default everything counts.
    """
    per_view = {_normalise_rel(p) for p in per_view_paths}
    ignore = list(ignore)

    def excluded(rel: str) -> bool:
        bare = rel.rstrip("/")
        if bare == PROGRESS_FILE or is_cache(rel) or tree_ignored(rel, ignore):
            return True
        return any(bare == p or bare.startswith(p + "/") for p in per_view)

    entries = listing(solution_dir, exclude=excluded)
    return listing_hash(entries), entries
