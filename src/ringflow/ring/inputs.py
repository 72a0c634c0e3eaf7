"""The inputs a program reads: a ring-owned snapshot of each view, taken at lock time.

The snapshot lives at `runs/<ring>/inputs/<alias>/`, where the alias is the random name
programs are given for the view (real and disguised copies alike), so neither the path
nor the mount table tells a program which view, or which kind of run, it is in
(docs/contracts.md#sandbox). Files are hard links where the filesystem allows (copies otherwise),
and each file's (size, mtime_ns, ctime_ns, inode) is recorded: an in-place change of the
task's file shows in its ctime, so `check_inputs` before and after every execution
proves that the data a program read is the data that was hashed (docs/contracts.md#sandbox).
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from ..core.errors import InputError
from ..core.hashing import sha256_file
from ..core.state import Ring
from ..workcopy import link_or_copy

SNAPSHOT_DIR = "inputs"


def snapshot_path(ring_dir: str | os.PathLike, alias: str) -> Path:
    return Path(ring_dir) / SNAPSHOT_DIR / alias


def _signature(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def take_snapshot(source: Path, dest: Path, world_readable: bool) -> None:
    """Link (or copy) every file of source into dest, folders 0755.

    `world_readable`: a file another uid could not read is copied (0444) rather than
    linked, so that the sandbox user of a root-run ring can read it without ringflow
    changing the mode of the user's own file.
    """
    if dest.exists():
        shutil.rmtree(dest)
    staging = dest.with_name(dest.name + ".tmp")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True, mode=0o755)
    for dirpath, dirnames, filenames in os.walk(source):
        rel = Path(dirpath).relative_to(source)
        for name in dirnames:
            path = Path(dirpath, name)
            if path.is_symlink():
                raise InputError(f"{path}: is a symbolic link; links are not hashed")
            (staging / rel / name).mkdir(mode=0o755)
        for name in filenames:
            path = Path(dirpath, name)
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode):
                raise InputError(f"{path}: is not a regular file")
            target = staging / rel / name
            if world_readable and not st.st_mode & stat.S_IROTH:
                _copy(path, target)
                continue
            link_or_copy(path, target, copy=_copy)
    staging.rename(dest)


def _copy(source: Path, target: Path) -> None:
    shutil.copyfile(source, target)
    os.chmod(target, 0o444)


def record_snapshot(source: Path, dest: Path, hashes: dict[str, str]) -> list[list]:
    """[relpath, size, mtime_ns, ctime_ns, inode, sha256] of every snapshot file, checked
    against the task's files: a linked file must still be the same inode as the task's.
    `hashes` are the inputs' sha256 from the view's content hash, by relative path."""
    records = []
    for dirpath, _, filenames in os.walk(dest):
        for name in filenames:
            path = Path(dirpath, name)
            rel = path.relative_to(dest).as_posix()
            st = os.lstat(path)
            original = os.lstat(source / rel)
            if st.st_nlink > 1 and st.st_ino != original.st_ino:
                raise InputError(
                    f"{source / rel}: changed while the ring was being locked; lock again"
                )
            if st.st_nlink == 1 and st.st_size != original.st_size:
                raise InputError(
                    f"{source / rel}: changed while the ring was being locked; lock again"
                )
            if rel not in hashes:
                raise InputError(
                    f"{source / rel}: appeared while the ring was being locked; lock again"
                )
            records.append([rel, *_signature(st), hashes[rel]])
    return sorted(records)


def check_inputs(dest: Path, records: list[list]) -> str | None:
    """Why the snapshot no longer holds what was hashed, or None (a few ms per 1,000 files).

    A file whose (size, mtime_ns, ctime_ns, inode) differ from the lock's is hashed again:
    only different content counts as a change (a rewrite with the same bytes does not)."""
    expected = {r[0]: r[1:] for r in records}
    root = os.fspath(dest)
    cut = len(root) + 1
    seen = 0
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            path = f"{dirpath}/{name}"
            rel = path[cut:]
            want = expected.get(rel)
            if want is None:
                return f"{rel} was added to the view's inputs after the ring was locked"
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                return f"{rel} vanished from the view's inputs"
            same = (
                st.st_size == want[0]
                and st.st_mtime_ns == want[1]
                and st.st_ctime_ns == want[2]
                and st.st_ino == want[3]
            )
            if not same and sha256_file(path) != want[4]:
                return f"{rel} was changed after the ring was locked"
            seen += 1
    if seen != len(expected):
        return "files were removed from the view's inputs after the ring was locked"
    return None


def program_inputs(ring: Ring, view: str, variant: str) -> Path:
    """The inputs folder an execution's program reads (and its validator checks)."""
    if variant.startswith("blind"):
        from ..core.disguise import BLIND_COPIES, disguised_inputs

        return disguised_inputs(ring, view, BLIND_COPIES[variant])
    return ring.views[view].snapshot
