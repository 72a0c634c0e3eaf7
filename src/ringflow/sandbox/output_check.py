"""A program's output is data, never a pointer (docs/contracts.md#the-evaluators-sandbox): checked
before anyone reads it.

Symbolic links, hard links (another name of a file elsewhere), devices, FIFOs and
sockets in the output are refused before the validator and the scorer see it, so a
program can neither point the scorer at the labels nor make it block or read without
end. Modes are normalised so that the unprivileged evaluator can read what is there.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

MAX_ENTRIES = 1_000_000


def refuse_pointers(output: Path) -> str | None:
    """The first reason the output folder is not plain data, or None (modes normalised)."""
    try:
        st = os.lstat(output)
    except FileNotFoundError:
        return "no output folder"
    if not stat.S_ISDIR(st.st_mode):
        return "the output folder was replaced by something that is not a folder"
    seen = 0
    for dirpath, dirnames, filenames in os.walk(output):
        for name in [*dirnames, *filenames]:
            seen += 1
            if seen > MAX_ENTRIES:
                return f"more than {MAX_ENTRIES} entries in the output"
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, output)
            entry = os.lstat(path)
            mode = entry.st_mode
            if stat.S_ISLNK(mode):
                target = os.readlink(path)
                return f"output {rel} is a symbolic link (to {target!r}); output must be data"
            if stat.S_ISDIR(mode):
                os.chmod(path, 0o755)
                continue
            if not stat.S_ISREG(mode):
                return f"output {rel} is not a regular file ({_kind(mode)}); output must be data"
            if entry.st_nlink > 1:
                return f"output {rel} is a hard link to another file; output must be data"
            os.chmod(path, 0o644)
    os.chmod(output, 0o755)
    return None


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a file"
