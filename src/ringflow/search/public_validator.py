"""The task's public validator, handed to engineer sessions (docs/contracts.md#engineer).

A session never sees the task folder. When the task ships a validator, the session gets
a read-only copy of the files its command names (`/ringflow/validator/files/`), never the
scorer's files, task.yaml's views or any label, and `$RINGFLOW_VALIDATE`, a command that
runs it on predictions:

    "$RINGFLOW_VALIDATE" --pred PRED_DIR --inputs "$RINGFLOW_INPUTS/<view>"

Exit 0: valid; otherwise the validator's last stderr line is the reason, as in the ring.
It runs in the session's own sandbox, from the copy's folder, with `python` meaning the
candidates' interpreter. A validator whose command names a file the scorer's command also
names (or a folder holding one, or anything under views/) is not handed out, and the
instructions say why.
"""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

from ..core.jsonio import atomic_write_json, atomic_write_text
from ..core.state import LockedTask

RUNNER = Path(__file__).with_name("validate_runner.py")
INTERPRETERS = ("python", "python3")


def _named_paths(task_dir: Path, command: str) -> list[tuple[int, Path]]:
    """(argument position, resolved path) of every argument naming something that exists
    in the task folder."""
    named = []
    for position, word in enumerate(shlex.split(command)):
        if position == 0 and word in INTERPRETERS:
            continue
        path = Path(word) if Path(word).is_absolute() else task_dir / word
        try:
            resolved = path.resolve()
        except OSError:
            continue
        if resolved.exists() and resolved.is_relative_to(task_dir):
            named.append((position, resolved))
    return named


def _overlap(a: Path, b: Path) -> bool:
    return a == b or a.is_relative_to(b) or b.is_relative_to(a)


def refusal(task: LockedTask) -> str | None:
    """Why the task's validator cannot be handed to a session, or None when it can."""
    if not task.validator:
        return "the task ships no validator"
    task_dir = Path(task.dir).resolve()
    views = task_dir / "views"
    scorer = [path for _, path in _named_paths(task_dir, task.scorer)]
    for _, path in _named_paths(task_dir, task.validator):
        rel = path.relative_to(task_dir)
        if path == task_dir or _overlap(path, views):
            return f"its command names {rel.as_posix() or '.'}, which holds the views' labels"
        for theirs in scorer:
            if _overlap(path, theirs):
                return f"its command names {rel.as_posix()}, which the scorer's command uses too"
    return None


def make_copy(task: LockedTask, folder: Path, *, python: str, runner: str, inside: str) -> Path:
    """Write the session's copy into `folder` (seen by the session as `inside`): files/,
    command.json and the `validate` command; returns the path of `validate`."""
    task_dir = Path(task.dir).resolve()
    files = folder / "files"
    files.mkdir(parents=True)
    argv = shlex.split(task.validator)
    for position, path in _named_paths(task_dir, task.validator):
        rel = path.relative_to(task_dir)
        target = files / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.is_dir():
            shutil.copytree(path, target, symlinks=False)
        else:
            shutil.copy2(path, target)
        argv[position] = rel.as_posix()  # the task folder's own path stays hidden
    atomic_write_json(folder / "command.json", {"argv": argv})
    validate = folder / "validate"
    atomic_write_text(
        validate,
        "#!/bin/sh\n"
        "# The task's public validator: validate --pred DIR --inputs DIR\n"
        "# Exit 0: valid; otherwise its last line on stderr says why.\n"
        f'exec {shlex.quote(python)} {shlex.quote(runner)} {shlex.quote(inside)} "$@"\n',
    )
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o755 if path.is_dir() or path == validate else 0o444)
    return validate
