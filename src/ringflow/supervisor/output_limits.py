"""What a program wrote against limits.output_files and limits.output_gb
(docs/limits.md#limits-of-an-execution).

Counted by descriptor over the output and writable folders together (ringflow/
core/safetree.py): counting stops at the first limit passed, so no cap on the walk lets
a program hide files past it, and sizes are apparent sizes (a sparse file counts at
the size it claims, which is what a copy of it would take).
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Sequence

from ..core.safetree import usage
from .oom import stderr_says

# How a refused write past RLIMIT_FSIZE shows: strerror(EFBIG) where the program ignores
# SIGXFSZ (Python does), else the signal's own default, which ends the process.
FILE_TOO_LARGE = re.compile(rb"File too large|[Ff]ile size limit exceeded")
XFSZ_CODES = (-signal.SIGXFSZ, 128 + signal.SIGXFSZ)


def file_too_large(stderr_log: str | os.PathLike, exit_code: int | None) -> bool:
    """Whether a crash was a write past the largest file a program may write."""
    return exit_code in XFSZ_CODES or stderr_says(stderr_log, FILE_TOO_LARGE)


def over_limits(
    folders: Sequence[os.PathLike | str],
    max_files: int | None,
    max_bytes: int | None,
    names: tuple[str, str] = ("limits.output_gb", "limits.output_files"),
) -> str | None:
    """Why what the program wrote passes limits.output_files or limits.output_gb, or None.

    Counting stops at the first limit (never a cap a program could hide behind); sizes
    are apparent sizes, so a sparse file counts at the size it claims."""
    entries = size = 0
    for folder in folders:
        left_files = None if max_files is None else max_files - entries
        left_bytes = None if max_bytes is None else max_bytes - size
        found = usage(folder, max_entries=left_files, max_bytes=left_bytes, make_readable=True)
        entries, size = entries + found.entries, size + found.bytes
        if found.over and "entries" in found.over:
            return (f"output file limit exceeded: more than {max_files} files and folders "
                    f"({names[1]} = {max_files})")  # fmt: skip
        if found.over and "bytes" in found.over:
            return (f"output limit exceeded: more than {max_bytes} bytes written "
                    f"({names[0]} = {max_bytes / 1024**3:g})")  # fmt: skip
        if found.over:
            return f"output limit exceeded: the output is {found.over}"
    return None
