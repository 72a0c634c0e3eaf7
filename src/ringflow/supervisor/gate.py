"""Starting a program already inside its cgroups and limits, without a Python step in the
child (docs/architecture.md#how-a-program-starts).

A callable run in the child between fork and exec (Popen's `preexec_fn`) makes Python fork
the whole supervisor instead of `vfork`ing it, and runs interpreter code in a copy of a
process with threads (which Python's own documentation warns may deadlock): a few
milliseconds of page copies per start in a supervisor of some 30 MB. Instead the child
starts as a small shell that waits on its standard input. The supervisor, its parent, moves
it into the run's cgroups and sets its limits from outside, then tells it to go on; the
shell gives the program /dev/null as its standard input, as before, and becomes it. Whatever
the shell forks from then on is born inside.
"""

from __future__ import annotations

import os
import resource
import shutil
from collections.abc import Sequence

GO = b"go\n"
# The gate's own failure: its parent died or refused before saying go. Never the
# program's code: the program has not started.
NOT_RELEASED = 126
GATE = f'IFS= read -r word && [ "$word" = go ] || exit {NOT_RELEASED}; exec "$@" </dev/null'


def gated_argv(argv: Sequence[str]) -> list[str]:
    return ["/bin/sh", "-c", GATE, "sh", *argv]


def check_executable(command: str, env: dict, cwd: str | os.PathLike) -> None:
    """Raise as Popen would for a program that cannot be started: the gate's shell would
    report it only as an exit code, which reads like the program's own. A path with a
    slash is the child's, relative to the folder it starts in."""
    if "/" in command:
        found = os.path.join(cwd, command)
    else:
        found = shutil.which(command, path=env.get("PATH", os.defpath))
    if found is None or not os.path.isfile(found):
        raise FileNotFoundError(2, "No such file or directory", command)
    if not os.access(found, os.X_OK):
        raise PermissionError(13, "Permission denied", command)


def place(pid: int, procs_files: Sequence[str], data_limit: int | None) -> None:
    """Move `pid` into each cgroup (a cgroup it cannot join is left for the caller to
    notice) and give it the data limit (OSError where that is refused)."""
    for path in procs_files:
        try:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, str(pid).encode())
            finally:
                os.close(fd)
        except OSError:
            pass
    if data_limit is not None:
        resource.prlimit(pid, resource.RLIMIT_DATA, (data_limit, data_limit))


def release(gate_fd: int) -> None:
    try:
        os.write(gate_fd, GO)
    finally:
        os.close(gate_fd)
