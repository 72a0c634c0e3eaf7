"""A program's output is data, never a pointer (docs/contracts.md#the-evaluators-sandbox): checked
before anyone reads it.

Symbolic links, hard links (another name of a file elsewhere), devices, FIFOs and
sockets in the output are refused before the validator and the scorer see it, so a
program can neither point the scorer at the labels nor make it block or read without
end. Modes are normalised so that the unprivileged evaluator can read what is there.
The walk is descriptor-relative (any depth, any name: ringflow/core/safetree.py); names in
reasons are escaped (ringflow/core/safetext.py, docs/limits.md).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..core.safetext import escape_name
from ..core.safetree import Entry, TreeLimit, walk

MAX_ENTRIES = 1_000_000  # a backstop only: limits.output_files stops a run long before


def refuse_pointers(output: Path, max_entries: int = MAX_ENTRIES) -> str | None:
    """Why the output folder is not plain data (its first entry refused, and how many
    more there are), or None (modes normalised)."""
    try:
        st = os.lstat(output)
    except FileNotFoundError:
        return "no output folder"
    if not stat.S_ISDIR(st.st_mode):
        return "the output folder was replaced by something that is not a folder"
    os.chmod(output, 0o755)
    first, more = None, 0
    try:
        for entry in walk(output, max_entries=max_entries, before_descent=_readable_dir):
            refused = _refusal(entry)
            if refused is not None and first is None:
                first = refused
            elif refused is not None:
                more += 1
    except TreeLimit as exc:
        first = first or f"the output has {exc.reason}"
    except OSError as exc:
        first = first or f"the output could not be read ({escape_name(exc.strerror or str(exc))})"
    if first is not None and more:
        first += f" ({more} more entr{'y' if more == 1 else 'ies'} of the output refused too)"
    return first


def _readable_dir(entry: Entry) -> None:
    os.chmod(entry.name, 0o755, dir_fd=entry.dir_fd)  # a folder, as lstat just saw


def _refusal(entry: Entry) -> str | None:
    mode = entry.st.st_mode
    rel = entry.rel
    if stat.S_ISLNK(mode):
        target = escape_name(os.readlink(entry.name, dir_fd=entry.dir_fd))
        return f"output {rel} is a symbolic link (to {target}); output must be data"
    if stat.S_ISDIR(mode):
        return None
    if not stat.S_ISREG(mode):
        return f"output {rel} is not a regular file ({_kind(mode)}); output must be data"
    if entry.st.st_nlink > 1:
        return f"output {rel} is a hard link to another file; output must be data"
    fd = os.open(entry.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                 dir_fd=entry.dir_fd)  # fmt: skip
    try:
        os.fchmod(fd, 0o644)
    finally:
        os.close(fd)
    return None


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a file"
