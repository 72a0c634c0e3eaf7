"""Lend writable paths to the sandbox user for one run, then take them back.

The program runs as an unprivileged uid, so what it may write must belong to
that uid during the run. Afterwards every entry that the uid owns under a lent
root goes back to the root's original owner: files the program created belong
to the ring's owner again. Symlinks are never followed, and an entry the uid
does not own is never touched, so a program cannot make ringflow chown a file
outside the lent tree.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from ringflow.core.errors import SandboxError
from ringflow.core.safetext import escape_name
from ringflow.core.safetree import TreeLimit, walk


def refuse_shared_inodes(root: Path) -> None:
    """Raise if a regular file under root (or root itself) has another hard link.

    Lending such a file would lend its other names too (for instance an
    object of the weights store), so it must be replaced by a private copy first.
    """
    for _key, st, _chown in _walk(root):
        if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
            raise SandboxError(
                f"{root} holds a file with {st.st_nlink} hard links; a file the program may "
                "write must be a private copy (replace links into the store before the run)"
            )


@dataclass
class OwnershipLoan:
    """Which roots were lent to (or are written by) uid/gid, and who owned what before."""

    uid: int
    gid: int
    _roots: dict[Path, tuple[int, int]] = field(default_factory=dict)
    _before: dict[tuple[Path, tuple[str, ...]], tuple[int, int]] = field(default_factory=dict)

    def lend(self, root: Path) -> None:
        """Give root (a file or a whole folder tree) to uid/gid, remembering each owner."""
        refuse_shared_inodes(root)
        st = root.lstat()
        self._roots.setdefault(root, (st.st_uid, st.st_gid))
        for key, est, chown in _walk(root):
            self._before.setdefault((root, key), (est.st_uid, est.st_gid))
            chown(self.uid, self.gid)

    def adopt(self, root: Path) -> None:
        """Register a root the uid will fill without lending it (entries moved in later)."""
        st = root.lstat()
        self._roots.setdefault(root, (st.st_uid, st.st_gid))

    def take_back(self) -> list[str]:
        """Return every uid-owned entry under each root to its owner; notes on what was skipped.

        What the program wrote is walked by descriptor (any depth, any name); a tree
        past the walk's depth keeps its deepest entries with the uid, and says so."""
        notes: list[str] = []
        for root, root_owner in self._roots.items():
            if not os.path.lexists(root):
                continue
            try:
                for key, st, chown in _walk(root):
                    if st.st_uid != self.uid:
                        continue
                    lent = (root, key) in self._before
                    if stat.S_ISREG(st.st_mode) and st.st_nlink > 1 and not lent:
                        notes.append(f"left {escape_name('/'.join(key))} under {root} to uid "
                                     f"{self.uid}: it has other hard links")  # fmt: skip
                        continue
                    chown(*self._before.get((root, key), root_owner))
            except (TreeLimit, OSError) as exc:
                notes.append(f"left part of {root} to uid {self.uid}: {exc}")
        return notes


def _walk(root: Path):
    """(relative parts, lstat, chown) of root, then of every entry below it, without
    following symlinks."""
    st = root.lstat()
    yield (), st, lambda uid, gid: os.chown(root, uid, gid, follow_symlinks=False)
    if not stat.S_ISDIR(st.st_mode):
        return
    for entry in walk(root, max_depth=4096):

        def chown(uid: int, gid: int, entry=entry) -> None:
            os.chown(entry.name, uid, gid, dir_fd=entry.dir_fd, follow_symlinks=False)

        yield entry.parts, entry.st, chown
