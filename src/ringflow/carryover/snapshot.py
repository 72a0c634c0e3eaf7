"""File trees of a snapshot: what is copied, what is skipped and why, each file's sha256.

Pure helpers shared by sealing (copy into a staging folder) and import (verify, then copy
into the next ring). Only regular files are ever copied: a symlink, FIFO or device is
skipped and listed, so a snapshot is plain data.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path, PurePosixPath

from ..core.errors import InputError
from ..core.safetext import escape_name, is_plain_name
from ..core.safetree import TreeLimit, walk

CHUNK = 1 << 20


def copy_hashing(source: Path, dest: Path) -> tuple[str, int]:
    """Copy one regular file (never following a link), fsync it; (sha256, size) of what was
    copied: the bytes hashed are the bytes written."""
    digest = hashlib.sha256()
    size = 0
    fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InputError(f"{source}: not a regular file")
        dest.parent.mkdir(parents=True, exist_ok=True)
        with open(dest, "xb") as out:
            while chunk := os.read(fd, CHUNK):
                digest.update(chunk)
                out.write(chunk)
                size += len(chunk)
            out.flush()
            os.fsync(out.fileno())
    finally:
        os.close(fd)
    return digest.hexdigest(), size


def file_sha256(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        while chunk := os.read(fd, CHUNK):
            digest.update(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    return digest.hexdigest(), size


def walk_entries(root: Path) -> list[tuple[str, os.stat_result]]:
    """(relative posix path, lstat) of every non-folder entry under root, sorted."""
    return walk_checked(root)[0]


MAX_SEALED_PATH = 1024  # characters: a sealed copy stays well under PATH_MAX
MAX_SEALED_DEPTH = 64


def walk_checked(root: Path) -> tuple[list[tuple[str, os.stat_result]], list[dict]]:
    """(entries as walk_entries, entries left out): a name that is not plain text, a path
    too long or too deep to copy is left out with why, its name escaped (docs/limits.md);
    the walk is by descriptor, so no tree a program or a session wrote can stop a seal."""
    out, left = [], []
    try:
        for entry in walk(root, max_depth=MAX_SEALED_DEPTH, unreadable="skip"):
            rel = "/".join(entry.parts)
            why = None
            if not is_plain_name(entry.name):
                why = "name is not plain text"
            elif len(rel) > MAX_SEALED_PATH:
                why = f"path longer than {MAX_SEALED_PATH} characters"
            if why is not None:
                left.append({"path": escape_name(rel)[:MAX_SEALED_PATH], "why": why,
                             "size": entry.st.st_size})  # fmt: skip
                continue
            if not entry.is_dir:
                out.append((rel, entry.st))
    except TreeLimit as exc:
        left.append({"path": "", "why": f"the tree is {exc.reason}", "size": 0})
    except OSError as exc:
        left.append({"path": "", "why": f"the tree could not be read: {exc.strerror}", "size": 0})
    return sorted(out), left


def why_skipped(info: os.stat_result, max_bytes: int) -> str | None:
    """Why a file is left out of a seal, or None when it is sealed."""
    if stat.S_ISLNK(info.st_mode):
        return "symlink"
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file"
    if info.st_size > max_bytes:
        return f"larger than max_file_mb ({info.st_size} bytes)"
    return None


def safe_relpath(raw: object) -> str:
    """A relative path inside a snapshot, as SEAL.json may list it; refuses anything else."""
    if not isinstance(raw, str) or not raw:
        raise InputError(f"not a file path: {raw!r}")
    path = PurePosixPath(raw)
    if path.is_absolute() or ".." in path.parts or path.as_posix() != raw:
        raise InputError(f"not a plain relative path: {raw!r}")
    return raw
