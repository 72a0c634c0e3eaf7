"""When written records reach the disk: at once, or together at the end of a group
(docs/ring-folder.md#durability).

Outside a group every record is synced as it is written (its bytes before its rename, its
folder after). A step that writes many records whose completion is marked by one later
file, written after the group (the import's `nodes/index.json`), opens a group: its
writes are synced once, at the group's end, before that marker is written. A crash inside
a group leaves no marker, so the step runs again from the start and writes every record
again. Syncing many files one after another costs about one journal commit, where a sync
per record costs one each.

The end of a group syncs the ledgers first, then the records and their folders, and only
then anchors each ledger's head in its store: a store never vouches for a line that a
crash could still take from the ledger.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from contextvars import ContextVar


class _Group:
    def __init__(self) -> None:
        self.ledgers: dict[str, None] = {}
        self.files: dict[str, None] = {}
        self.folders: dict[str, None] = {}
        self.after: dict[str, Callable[[], None]] = {}


_open: ContextVar[_Group | None] = ContextVar("ringflow_sync_group", default=None)


@contextlib.contextmanager
def group_commit() -> Iterator[None]:
    """Defer the syncs of the writes inside to its end (a group inside a group joins it)."""
    if _open.get() is not None:
        yield
        return
    group = _Group()
    token = _open.set(group)
    try:
        yield
    finally:
        # Also when the step fails: what it wrote is no less durable than one by one.
        _open.reset(token)
        _commit(group)


def grouped() -> bool:
    return _open.get() is not None


def sync_file(fd: int, path: str | os.PathLike) -> None:
    """Sync a file's bytes now (by its open fd), or at the group's end (by its path, which
    is where a rename puts it)."""
    group = _open.get()
    if group is None:
        os.fsync(fd)
    else:
        group.files[os.fspath(path)] = None


def sync_folder(path: str | os.PathLike) -> None:
    """Sync a folder's entries (a rename or a new file in it) now, or at the group's end."""
    group = _open.get()
    if group is None:
        fsync_dir(path)
    else:
        group.folders[os.fspath(path)] = None


def sync_ledger(fd: int, path: str | os.PathLike, anchor: Callable[[], None] | None) -> None:
    """Sync a ledger's appended lines, then run `anchor` (the store's note of its head).
    In a group both wait for its end, and only the last anchor of each ledger runs."""
    group = _open.get()
    if group is None:
        os.fsync(fd)
        if anchor is not None:
            anchor()
        return
    key = os.fspath(path)
    group.ledgers[key] = None
    if anchor is not None:
        group.after[key] = anchor


def fsync_dir(path: str | os.PathLike) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_path(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return  # removed inside the group: nothing of it to keep
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _commit(group: _Group) -> None:
    for path in group.ledgers:
        _fsync_path(path)
        fsync_dir(os.path.dirname(path) or ".")
    for path in group.files:
        _fsync_path(path)
    for path in group.folders:
        with contextlib.suppress(FileNotFoundError):
            fsync_dir(path)
    for anchor in group.after.values():
        anchor()
