"""Ask the kernel what the sandbox user may do, by trying it as that user.

Permission bits alone miss ACLs, odd mounts and the traversal of every
ancestor folder, so the checks that guard secrets run for real: a forked child
drops to the sandbox uid/gid and attempts each operation. Only the answers
travel back, through a pipe.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from ringflow.errors import SandboxError

# op -> what the child attempts on the path
_OPERATIONS = {
    "open": lambda path: os.close(os.open(path, os.O_RDONLY)),
    "list": lambda path: os.listdir(path),
    "search": lambda path: _require(os.access(path, os.X_OK), path),
    "exec": lambda path: _require(os.access(path, os.X_OK) and os.path.isfile(path), path),
}


def _require(allowed: bool, path: str) -> None:
    if not allowed:
        raise PermissionError(13, "Permission denied", path)


def attempt_as_user(uid: int, gid: int, checks: Sequence[tuple[str, str]]) -> list[str | None]:
    """Try each (operation, path) as uid/gid; None where it succeeded, else the error text.

    Operations: "open" (open for reading), "list" (list a folder), "search"
    (traverse a folder), "exec" (execute a file). Needs root to drop to uid.
    """
    unknown = [op for op, _ in checks if op not in _OPERATIONS]
    if unknown:
        raise ValueError(f"unknown operations {unknown}; known: {sorted(_OPERATIONS)}")
    if not checks:
        return []
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop, try, report, never return into the caller's code
        status = 0
        try:
            os.close(read_end)
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
            answers = []
            for op, path in checks:
                try:
                    _OPERATIONS[op](path)
                    answers.append(None)
                except OSError as exc:
                    answers.append(f"{exc.strerror or exc}")
            payload = json.dumps({"answers": answers}).encode()
        except BaseException as exc:
            payload = json.dumps({"failure": f"{type(exc).__name__}: {exc}"}).encode()
            status = 1
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(write_end, view) :]
        finally:
            os._exit(status)
    os.close(write_end)
    chunks = []
    with os.fdopen(read_end, "rb") as reader:
        while chunk := reader.read(65536):
            chunks.append(chunk)
    os.waitpid(pid, 0)
    try:
        reply = json.loads(b"".join(chunks) or b"{}")
    except ValueError as exc:
        raise SandboxError(f"the access check as uid {uid} returned garbage: {exc}") from exc
    if "answers" not in reply:
        reason = reply.get("failure", "no answer")
        raise SandboxError(f"could not check access as uid {uid}/gid {gid}: {reason}")
    return reply["answers"]


def ancestors_of(path: Path) -> list[Path]:
    """Every folder from / down to path's parent, and each folder a symlink hop passes.

    Follows the symlink chain of path itself (up to 40 hops), so that a venv's
    `bin/python -> /root/.pyenv/.../python3` names /root as well.
    """
    folders: list[Path] = []
    current = Path(os.path.abspath(path))
    for _ in range(40):
        for folder in reversed(current.parents):
            resolved = Path(os.path.realpath(folder))
            for step in [*reversed(resolved.parents), resolved]:
                if step not in folders:
                    folders.append(step)
        if not current.is_symlink():
            break
        current = Path(os.path.abspath(current.parent / os.readlink(current)))
    return folders


def first_untraversable(uid: int, gid: int, path: Path, include_self: bool = False) -> Path | None:
    """The first folder on the way to path (symlinks followed) that uid cannot traverse.

    With include_self, path is a folder that must be traversable too.
    """
    folders = ancestors_of(path)
    if include_self:
        folders.append(Path(os.path.realpath(path)))
    answers = attempt_as_user(uid, gid, [("search", str(folder)) for folder in folders])
    for folder, answer in zip(folders, answers, strict=True):
        if answer is not None:
            return folder
    return None


def describe_owner(path: Path) -> str:
    """'mode 0700, owner 0:0' for an error message; '' when path cannot be inspected."""
    try:
        st = path.lstat()
    except OSError:
        return ""
    return f"mode {stat.S_IMODE(st.st_mode):04o}, owner {st.st_uid}:{st.st_gid}"


def unreadable_by_bits(root: Path, uid: int, gid: int, limit: int = 5) -> list[Path]:
    """Entries of the tree under root that uid/gid could not read (folders: read and traverse).

    Judged from permission bits (owner, group, other; no supplementary groups,
    since the sandbox clears them). Used for folders that are bound into a
    sandbox whose host ancestors the user cannot reach, so a real attempt from
    outside would prove nothing. Stops after `limit` findings.
    """
    found: list[Path] = []

    def readable(st: os.stat_result, need: int) -> bool:
        if st.st_uid == uid:
            bits = (st.st_mode >> 6) & 7
        elif st.st_gid == gid:
            bits = (st.st_mode >> 3) & 7
        else:
            bits = st.st_mode & 7
        return bits & need == need

    if not readable(root.stat(), 5):
        return [root]
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            entry = Path(dirpath, name)
            st = entry.lstat()
            if stat.S_ISLNK(st.st_mode):
                continue
            need = 5 if stat.S_ISDIR(st.st_mode) else 4
            if not readable(st, need):
                found.append(entry)
                if len(found) >= limit:
                    return found
        dirnames[:] = [d for d in dirnames if Path(dirpath, d) not in found]
    return found
