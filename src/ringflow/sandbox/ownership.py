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

from ringflow.errors import SandboxError


def refuse_shared_inodes(root: Path) -> None:
    """Raise if a regular file under root (or root itself) has another hard link.

    Lending such a file would lend its other names too (for instance an
    object of the weights store), so it must be replaced by a private copy first.
    """
    for entry in _walk(root):
        st = entry.lstat()
        if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
            raise SandboxError(
                f"{entry} has {st.st_nlink} hard links; a file the program may write must be "
                "a private copy (replace links into the store before the run)"
            )


@dataclass
class OwnershipLoan:
    """Which roots were lent to (or are written by) uid/gid, and who owned what before."""

    uid: int
    gid: int
    _roots: dict[Path, tuple[int, int]] = field(default_factory=dict)
    _before: dict[Path, tuple[int, int]] = field(default_factory=dict)

    def lend(self, root: Path) -> None:
        """Give root (a file or a whole folder tree) to uid/gid, remembering each owner."""
        refuse_shared_inodes(root)
        st = root.lstat()
        self._roots.setdefault(root, (st.st_uid, st.st_gid))
        for entry in _walk(root):
            est = entry.lstat()
            self._before.setdefault(entry, (est.st_uid, est.st_gid))
            os.chown(entry, self.uid, self.gid, follow_symlinks=False)

    def adopt(self, root: Path) -> None:
        """Register a root the uid will fill without lending it (entries moved in later)."""
        st = root.lstat()
        self._roots.setdefault(root, (st.st_uid, st.st_gid))

    def take_back(self) -> list[str]:
        """Return every uid-owned entry under each root to its owner; notes on what was skipped."""
        notes: list[str] = []
        for root, root_owner in self._roots.items():
            if not os.path.lexists(root):
                continue
            for entry in _walk(root):
                try:
                    st = entry.lstat()
                except FileNotFoundError:
                    continue
                if st.st_uid != self.uid:
                    continue
                if stat.S_ISREG(st.st_mode) and st.st_nlink > 1 and entry not in self._before:
                    notes.append(f"left {entry} to uid {self.uid}: it has other hard links")
                    continue
                owner = self._before.get(entry, root_owner)
                os.chown(entry, *owner, follow_symlinks=False)
        return notes


def _walk(root: Path):
    """root, then every entry below it, without following symlinks."""
    yield root
    if not root.is_dir() or root.is_symlink():
        return
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            yield Path(dirpath, name)
