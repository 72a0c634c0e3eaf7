"""Walk a folder a candidate wrote, whatever it holds (docs/limits.md).

Every step is relative to an open folder descriptor (openat, fstatat), so a tree nested
deeper than PATH_MAX is read like any other; symlinks are never followed (a loop is just
a link); FIFOs, sockets and devices are reported, never opened; names are carried as
`str` with undecodable bytes as surrogates. A walk stops at `max_entries` or `max_depth`
by raising `TreeLimit`: its caller records the tree as over its limit, never as smaller
than it is.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass

from .safetext import escape_name

MAX_DEPTH = 256  # one open folder per level; deeper than any real output
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class TreeLimit(Exception):
    """The tree has more entries or levels than the walk may read; `reason` says which."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Entry:
    """One entry below the root, as lstat saw it; `dir_fd` is open while it is yielded."""

    parts: tuple[str, ...]
    st: os.stat_result
    dir_fd: int

    @property
    def name(self) -> str:
        return self.parts[-1]

    @property
    def rel(self) -> str:
        """The relative path, escaped for records and reasons."""
        return escape_name("/".join(self.parts))

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.st.st_mode)

    @property
    def is_file(self) -> bool:
        return stat.S_ISREG(self.st.st_mode)

    @property
    def is_link(self) -> bool:
        return stat.S_ISLNK(self.st.st_mode)


def open_dir(path: str | os.PathLike, dir_fd: int | None = None) -> int:
    """An fd of the folder at path (never through a symlink at its last step)."""
    return os.open(path, _DIR_FLAGS, dir_fd=dir_fd)


def walk(
    root: str | os.PathLike | int,
    *,
    max_entries: int | None = None,
    max_depth: int = MAX_DEPTH,
    before_descent=None,
    unreadable: str = "raise",
) -> Iterator[Entry]:
    """Every entry below root (not root itself), a folder before what it holds.

    `before_descent(entry)` runs before a folder is entered (to make it readable, say).
    A folder that cannot be opened raises its OSError, or is skipped with
    `unreadable="skip"`. Raises TreeLimit past max_entries entries or max_depth levels.
    """
    root_fd = root if isinstance(root, int) else open_dir(root)
    owned = [] if isinstance(root, int) else [root_fd]
    stack: list[tuple[int, tuple[str, ...], Iterator[os.DirEntry]]] = []
    seen = 0
    try:
        stack.append((root_fd, (), iter(os.scandir(root_fd))))
        while stack:
            fd, parts, entries = stack[-1]
            entry = next(entries, None)
            if entry is None:
                _close_scandir(entries)
                stack.pop()
                if fd != root_fd:
                    os.close(fd)
                continue
            seen += 1
            if max_entries is not None and seen > max_entries:
                raise TreeLimit(f"more than {max_entries} entries")
            try:
                st = os.stat(entry.name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue  # removed while we looked (a live tree)
            item = Entry((*parts, entry.name), st, fd)
            yield item
            if not stat.S_ISDIR(st.st_mode):
                continue
            if len(item.parts) >= max_depth:
                raise TreeLimit(f"nested deeper than {max_depth} levels at {item.rel[:200]}…")
            if before_descent is not None:
                before_descent(item)
            try:
                child = open_dir(entry.name, dir_fd=fd)
            except OSError:
                if unreadable == "skip":
                    continue
                raise
            try:
                stack.append((child, item.parts, iter(os.scandir(child))))
            except BaseException:
                os.close(child)
                raise
    finally:
        for fd, _parts, entries in stack:
            _close_scandir(entries)
            if fd != root_fd:
                os.close(fd)
        for fd in owned:
            os.close(fd)


def _close_scandir(entries) -> None:
    with contextlib.suppress(AttributeError, OSError):
        entries.close()


@dataclass
class Usage:
    """What a tree holds: entries, apparent bytes of its regular files, latest mtime."""

    entries: int = 0
    files: int = 0
    bytes: int = 0
    latest_mtime: float = 0.0
    over: str | None = None  # why the count stopped (TreeLimit), None when complete


def usage(
    root: str | os.PathLike,
    max_entries: int | None = None,
    max_bytes: int | None = None,
    unreadable: str = "skip",
    make_readable: bool = False,
) -> Usage:
    """Count a tree; stops at the first limit passed (`over` says which), never silently.

    Sizes are apparent sizes (st_size): a sparse file counts at the size it claims.
    """
    result = Usage()
    try:
        result.latest_mtime = os.stat(root, follow_symlinks=False).st_mtime
    except OSError:
        return result
    try:
        descent = _make_readable if make_readable else None
        for entry in walk(root, max_entries=max_entries, unreadable=unreadable,
                          before_descent=descent):  # fmt: skip
            result.entries += 1
            result.latest_mtime = max(result.latest_mtime, entry.st.st_mtime)
            if entry.is_file:
                result.files += 1
                result.bytes += entry.st.st_size
                if max_bytes is not None and result.bytes > max_bytes:
                    result.over = f"more than {max_bytes} bytes"
                    break
    except TreeLimit as exc:
        result.over = exc.reason
    except OSError:
        if unreadable != "skip":
            raise  # a live tree changing under the walk is counted as far as it was read
    return result


def _make_readable(entry: Entry) -> None:
    """A folder the program made unreadable to its owner is opened all the same."""
    with contextlib.suppress(OSError):
        os.chmod(entry.name, stat.S_IMODE(entry.st.st_mode) | 0o700, dir_fd=entry.dir_fd)


def remove_tree(path: str | os.PathLike, ignore_errors: bool = False) -> None:
    """Remove a tree of any depth, names and modes, holding two folders open at most.

    Each folder below the root is emptied of its files and its subfolders are moved up
    into the root (renameat), so no path string grows and no recursion deepens; a
    recursive rmtree would end in RecursionError on a tree a few thousand levels deep.
    """
    try:
        _remove_tree(path)
    except OSError:
        if not ignore_errors:
            raise


def _remove_tree(path: str | os.PathLike) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(path)
        return
    with contextlib.suppress(OSError):
        os.chmod(path, 0o700)  # a folder (lstat): opened and emptied by its owner
    root_fd = open_dir(path)
    try:
        while names := os.listdir(root_fd):
            for name in names:
                _empty_into_root(root_fd, name)
    finally:
        os.close(root_fd)
    os.rmdir(path)


def _empty_into_root(root_fd: int, name: str) -> None:
    st = os.stat(name, dir_fd=root_fd, follow_symlinks=False)
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=root_fd)
        return
    with contextlib.suppress(OSError):
        # An ordinary user may have to make it readable and writable first (a folder, as
        # lstat just saw: nothing else runs in the tree by now).
        os.chmod(name, 0o700, dir_fd=root_fd)
    fd = open_dir(name, dir_fd=root_fd)
    try:
        for sub in os.listdir(fd):
            sub_st = os.stat(sub, dir_fd=fd, follow_symlinks=False)
            if not stat.S_ISDIR(sub_st.st_mode):
                os.unlink(sub, dir_fd=fd)
                continue
            with contextlib.suppress(OSError):
                os.chmod(sub, 0o700, dir_fd=fd)  # moving a folder rewrites its ".."
            os.rename(sub, f".rm-{os.urandom(8).hex()}", src_dir_fd=fd, dst_dir_fd=root_fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=root_fd)


def read_head(path: str | os.PathLike, max_bytes: int) -> str | None:
    """The first max_bytes of a regular file as text (bad bytes replaced), or None when it
    is missing or not a regular file: a file a candidate wrote may be gigabytes of one
    line, a FIFO or a link."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, max_bytes).decode("utf-8", "replace")
    finally:
        os.close(fd)
