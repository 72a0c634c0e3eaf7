"""Pieces of command lines shared by the probe and the plans."""

from __future__ import annotations

import os
from pathlib import PurePosixPath

# Where the execution's folders appear inside a bubblewrap sandbox.
INSIDE = PurePosixPath("/ringflow")
# Mounted fresh inside the sandbox, so never bound from the host.
_OWN_MOUNTS = {"proc", "dev", "tmp", INSIDE.name}


def drop_privileges_argv(setpriv: str, uid: int, gid: int) -> list[str]:
    """The setpriv prefix that runs the rest of argv as uid/gid without any capability."""
    return [
        setpriv,
        f"--reuid={uid}",
        f"--regid={gid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "--",
    ]


def bwrap_root_argv() -> list[str]:
    """bwrap options for a root of read-only host entries, fresh /dev /proc /tmp, and /ringflow.

    The new root is bubblewrap's own tmpfs holding read-only binds of the
    host's top-level entries (symlinks recreated as symlinks): with the whole
    host / bound read-only, /ringflow could not be created, since a bind
    target must exist or lie under a tmpfs.
    """
    args: list[str] = []
    for name in sorted(os.listdir("/")):
        if name in _OWN_MOUNTS:
            continue
        host = f"/{name}"
        if os.path.islink(host):
            args += ["--symlink", os.readlink(host), host]
        elif os.path.isdir(host) or os.path.isfile(host):
            args += ["--ro-bind", host, host]
    args += [
        "--dev", "/dev",
        "--proc", "/proc",
        "--perms", "01777", "--tmpfs", "/tmp",
        "--perms", "01777", "--tmpfs", "/dev/shm",
        "--perms", "0755", "--dir", str(INSIDE),
    ]  # fmt: skip
    return args
