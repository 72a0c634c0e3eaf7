"""Stage trees where the sandbox user can reach them, and bring results back.

Used without bubblewrap: the execution's own folders usually sit under a
private tree the sandbox user cannot traverse, so what the program needs is
mirrored under a staging folder. Read-only files are hard links when that is
safe (same filesystem, readable by others, not writable by the sandbox user,
no set-id bits), else root-owned copies; folders are root-owned 0755, so the
sandbox user can read but never change the working copy.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from pathlib import Path, PurePosixPath

from ringflow.errors import SandboxError


def ensure_staging_root(root: Path) -> Path:
    """Create or check the shared staging root: a real folder owned by ringflow, mode 0711.

    0711 lets the sandbox user reach a stage whose name it knows without
    listing the others; a root that someone else owns (pre-created in a
    world-writable /tmp, for instance) is refused.
    """
    root = Path(os.path.abspath(root))
    with contextlib.suppress(FileExistsError):
        os.mkdir(root, 0o711)
    st = root.lstat()
    if not stat.S_ISDIR(st.st_mode):
        raise SandboxError(f"staging root {root} is not a folder (a link or a file?)")
    if st.st_uid != os.geteuid():
        raise SandboxError(
            f"staging root {root} belongs to uid {st.st_uid}, not to ringflow's uid {os.geteuid()}"
        )
    os.chmod(root, 0o711)
    return root


class Stager:
    """Mirrors trees into a stage for one sandbox uid; counts what had to be copied."""

    def __init__(self, uid: int, gid: int):
        self.uid = uid
        self.gid = gid
        self.copied = 0
        self.linked = 0

    def mirror_read_only(self, source: Path, target: Path, skip: set[PurePosixPath]) -> None:
        """Mirror source into the new folder target, leaving out the relative paths in skip."""
        _make_folder(target, 0o755)
        for dirpath, dirnames, filenames in os.walk(source):
            rel_dir = PurePosixPath(Path(dirpath).relative_to(source))
            keep = []
            for name in dirnames:
                rel = rel_dir / name
                if rel in skip:
                    continue
                if (Path(dirpath) / name).is_symlink():
                    filenames.append(name)  # recreated as a link below, never descended
                    continue
                _make_folder(target / rel, 0o755)
                keep.append(name)
            dirnames[:] = keep
            for name in filenames:
                rel = rel_dir / name
                if rel not in skip:
                    self._place_file(Path(dirpath) / name, target / rel)

    def _place_file(self, source: Path, target: Path) -> None:
        st = source.lstat()
        if stat.S_ISLNK(st.st_mode):
            os.symlink(os.readlink(source), target)
            os.lchown(target, 0, 0)
            return
        if not stat.S_ISREG(st.st_mode):
            return  # sockets, fifos and devices have no place in a working copy
        if self._safe_to_link(st):
            try:
                os.link(source, target)
                self.linked += 1
                return
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.EACCES):
                    raise
        shutil.copyfile(source, target, follow_symlinks=False)
        os.chown(target, 0, 0)
        os.chmod(target, 0o755 if st.st_mode & 0o111 else 0o644)
        self.copied += 1

    def _safe_to_link(self, st: os.stat_result) -> bool:
        mode = st.st_mode
        writable_by_sandbox = (
            st.st_uid == self.uid or (st.st_gid == self.gid and mode & 0o020) or mode & 0o002
        )
        return bool(mode & 0o004) and not writable_by_sandbox and not mode & 0o6000

    def copy_owned(self, source: Path, target: Path) -> None:
        """Copy the tree source to the new folder target, everything owned by the sandbox uid."""
        shutil.copytree(source, target, symlinks=True)
        for entry in [target, *_below(target)]:
            os.chown(entry, self.uid, self.gid, follow_symlinks=False)
        self.copied += 1


def move_contents(source: Path, target: Path, mirror: bool) -> None:
    """Move source's entries into target: rename where possible, else copy.

    An entry of the same name in target is replaced; with mirror, target's
    other entries are removed too (the stage held a full copy). Symlinks are
    moved as symlinks and never followed.
    """
    incoming = {entry.name for entry in source.iterdir()}
    for entry in list(target.iterdir()):
        if mirror or entry.name in incoming:
            _remove(entry)
    for entry in source.iterdir():
        destination = target / entry.name
        try:
            os.rename(entry, destination)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            if entry.is_dir() and not entry.is_symlink():
                shutil.copytree(entry, destination, symlinks=True)
            else:
                shutil.copy2(entry, destination, follow_symlinks=False)


def remove_tree(path: Path) -> None:
    """Remove a stage (symlinks inside are removed, never followed)."""
    if os.path.lexists(path):
        _remove(path)


def _remove(entry: Path) -> None:
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry)
    else:
        entry.unlink()


def _make_folder(path: Path, mode: int) -> None:
    os.mkdir(path)
    os.chmod(path, mode)  # not subject to the umask, unlike mkdir's mode


def _below(root: Path):
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            yield Path(dirpath, name)
