"""JSON on disk without half-written files: temporary path, fsync, rename."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from . import durability
from .durability import fsync_dir
from .errors import InputError


def canonical_json(obj: Any) -> bytes:
    """The byte form that every hash in ringflow is taken over."""
    return _encode(json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False))


def sha256_json(obj: Any) -> str:
    return hashlib.sha256(canonical_json(obj)).hexdigest()


def fsync_tree(root: str | os.PathLike) -> None:
    """fsync every file and folder under root (before a rename makes the tree visible)."""
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            path = os.path.join(dirpath, name)
            if os.path.islink(path):
                continue
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(dirpath)


def atomic_write_bytes(
    path: str | os.PathLike,
    data: bytes,
    mode: int = 0o644,
    durable: bool = True,
    sync_folder: bool = True,
) -> None:
    """Readers see the old bytes or the new, never a mix. `durable=False` skips the fsyncs:
    for a live view rewritten many times a second, where a stall on a busy disk would cost
    more than the last copy lost in a crash. `sync_folder=False` syncs the new bytes before
    the rename but not the rename itself: a crash may bring the previous version back,
    never a torn or empty file. For a file whose previous version stays true (the ledger's
    head: every earlier head is still in the ledger)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if durable:
                durability.sync_file(handle.fileno(), path)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if durable and sync_folder:
        durability.sync_folder(path.parent)


def _encode(text: str) -> bytes:
    """UTF-8 of JSON text that may carry an undecodable byte as a lone surrogate
    (surrogateescape): it is written as the JSON escape `\\udcNN`, which reads back as the
    same string, instead of failing (docs/limits.md#names)."""
    return text.encode("utf-8", "backslashreplace")


def atomic_write_json(
    path: str | os.PathLike,
    obj: Any,
    mode: int = 0o644,
    durable: bool = True,
    sync_folder: bool = True,
) -> None:
    text = json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    atomic_write_bytes(path, _encode(text), mode, durable, sync_folder)


def atomic_write_text(path: str | os.PathLike, text: str, mode: int = 0o644) -> None:
    atomic_write_bytes(path, text.encode(), mode)


def read_json(path: str | os.PathLike, what: str | None = None) -> Any:
    """Read a JSON file; a malformed one raises InputError naming the file and the fault."""
    path = Path(path)
    label = what or str(path)
    try:
        text = path.read_bytes().decode()
    except FileNotFoundError:
        raise InputError(f"{label}: file not found: {path}") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{label}: not UTF-8 text (byte {exc.start})") from None
    return parse_json(text, label)


def parse_json(text: str, label: str) -> Any:
    """json.loads whose every failure, nesting too deep included, is an InputError."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{label}: malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    except RecursionError:
        raise InputError(f"{label}: JSON nested too deeply to read") from None


_cache: dict[str, tuple[tuple[int, int, int], Any]] = {}


def read_json_cached(path: str | os.PathLike) -> Any:
    """read_json for a long-lived process that reads the same files again and again.

    Snakemake evaluates input functions for every job, often more than once; the files
    they read (RING.json, the node index, node.json) are replaced atomically, never edited
    in place, so (inode, mtime, size) identifies a version. Callers must not mutate the
    result.
    """
    st = os.stat(path)
    key = (st.st_ino, st.st_mtime_ns, st.st_size)
    hit = _cache.get(str(path))
    if hit is None or hit[0] != key:
        hit = (key, read_json(path))
        _cache[str(path)] = hit
    return hit[1]


def append_jsonl(path: str | os.PathLike, obj: Any, fsync: bool = True) -> None:
    """Append one line; O_APPEND keeps concurrent writers' lines whole."""
    line = _encode(json.dumps(obj, sort_keys=True, ensure_ascii=False) + "\n")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def read_jsonl(path: str | os.PathLike) -> list[Any]:
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def jsonl_objects(text: str | bytes) -> list[dict]:
    """The JSON objects of a JSON-lines text, one per line; a torn line (its writer killed
    mid-write), one that is not UTF-8 or one that is no object is left out."""
    objects = []
    for line in text.splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict):
            objects.append(item)
    return objects


def read_jsonl_objects(path: str | os.PathLike) -> list[dict]:
    """jsonl_objects of the file at `path`; [] where there is none."""
    try:
        return jsonl_objects(Path(path).read_bytes())
    except FileNotFoundError:
        return []
