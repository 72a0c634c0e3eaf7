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

from ..errors import InputError

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
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath)
        for name in list(dirnames):
            info = (base / name).lstat()
            if stat.S_ISLNK(info.st_mode):  # os.walk lists a link to a folder as a folder
                dirnames.remove(name)
                filenames.append(name)
        for name in filenames:
            path = base / name
            out.append((path.relative_to(root).as_posix(), path.lstat()))
    return sorted(out)


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
