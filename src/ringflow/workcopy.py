"""An execution's own working copy of a solution: hardlinks to read-only files
(docs/contracts.md#candidate)."""

from __future__ import annotations

import errno
import os
import shutil
import stat
from pathlib import Path

from .core.safetree import remove_tree


def make_readonly_tree(root: Path) -> None:
    """Files 0444, folders 0755: shared by every working copy linked from it."""
    for dirpath, _dirnames, filenames in os.walk(root):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            path = Path(dirpath) / name
            if not path.is_symlink():
                os.chmod(path, stat.S_IMODE(path.stat().st_mode) & 0o555 | 0o444)


def link_or_copy(src: Path, dst: Path, copy=shutil.copy2) -> None:
    """Hardlink src as dst; copy (with `copy`) where no link can be made (another filesystem,
    a file the kernel will not let this user link)."""
    try:
        os.link(src, dst)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
            raise
        copy(src, dst)


def link_tree(source: Path, dest: Path) -> None:
    """Mirror `source` into `dest`, hardlinking files (copying across filesystems)."""
    for dirpath, _dirnames, filenames in os.walk(source):
        rel = Path(dirpath).relative_to(source)
        target_dir = dest / rel
        target_dir.mkdir(parents=True, exist_ok=True)
        for name in filenames:
            src, dst = Path(dirpath) / name, target_dir / name
            if src.is_symlink():
                os.symlink(os.readlink(src), dst)
                continue
            link_or_copy(src, dst)


def submission_files(root: Path) -> list[str]:
    """Relative paths of every file of a node's submission (what a working copy starts with)."""
    return sorted(
        (Path(dirpath) / name).relative_to(root).as_posix()
        for dirpath, _dirnames, filenames in os.walk(root)
        for name in filenames
    )


def reset_dir(path: Path) -> Path:
    """An empty folder at path; what was there (a program's output: any depth, any
    names) is removed first."""
    if path.exists() or path.is_symlink():
        remove_tree(path)
    path.mkdir(parents=True)
    return path


def unshare_files(folder: Path) -> list[str]:
    """Replace every hardlinked file under `folder` with a private, writable copy.

    A training run may rewrite its weights folder; files there that are hardlinked to the
    node's submission (a fixed artifact beside the per-view weights) must not be shared.
    """
    copied = []
    for dirpath, _dirnames, filenames in os.walk(folder):
        for name in filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                private = path.with_name(f".{name}.private")
                shutil.copy2(path, private)
                os.chmod(private, stat.S_IMODE(st.st_mode) | 0o200)
                os.replace(private, path)
                copied.append(str(path.relative_to(folder)))
    return copied
