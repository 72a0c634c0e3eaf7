"""The candidate contract (docs/contracts.md#candidate): what a `solution/` folder must hold,
checked up front."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from collections.abc import Mapping
from dataclasses import field
from pathlib import Path, PurePosixPath

from .core.errors import CandidateError, InputError
from .core.frozen import Frozen, frozen_record
from .core.hashing import CACHE_DIR_NAMES, PROGRESS_FILE, is_cache
from .core.jsonio import read_json
from .core.safetext import escape_name, is_plain_name
from .core.safetree import Entry, TreeLimit, walk
from .core.state import Ring


@frozen_record
class Solution(Frozen):
    dir: Path
    command: tuple[str, ...]
    seed_affects_training: bool
    train_seed: int
    per_view_paths: tuple[str, ...]
    fixed_artifacts: tuple[str, ...] = field(default=())
    train_seed_arg: bool = False

    @property
    def has_weights(self) -> bool:
        return bool(self.per_view_paths)

    def training_seed(self, program_seed: int) -> int:
        return program_seed if self.seed_affects_training else self.train_seed

    def to_dict(self) -> dict:
        return {
            "command": list(self.command),
            "seed_affects_training": self.seed_affects_training,
            "train_seed": self.train_seed,
            "per_view_paths": list(self.per_view_paths),
            "fixed_artifacts": list(self.fixed_artifacts),
            "train_seed_arg": self.train_seed_arg,
        }


def train_seed_args(solution: dict, spec: dict) -> list[str]:
    """`--train-seed N` for a program whose EXECUTION.json asks for it
    (docs/contracts.md#candidate); else none: programs with strict argument parsing keep working,
    and all get RINGFLOW_TRAIN_SEED."""
    if not solution.get("train_seed_arg") or "train_seed" not in spec:
        return []
    return ["--train-seed", str(spec["train_seed"])]


def weights_dirs(per_view_paths) -> list[str]:
    """The subfolders that hold per-view files (writable only while training)."""
    return sorted({str(PurePosixPath(p).parent) for p in per_view_paths})


@frozen_record
class TreeLimits(Frozen):
    """What a solution tree may hold (engineer.limits for a workspace); None: no limit."""

    max_files: int | None = None  # files and folders
    max_bytes: int | None = None  # apparent sizes of its files together
    max_file_bytes: int | None = None


NO_LIMITS = TreeLimits()
MAX_SOLUTION_DEPTH = 64
MAX_SOLUTION_PATH = 1024  # characters of a relative path: every copy stays under PATH_MAX


def task_file_ids(task_dir: str | Path) -> dict[tuple[int, int], str]:
    """(device, inode) -> the task-relative path of every regular file of the task folder
    (its views' inputs and labels, its scorer): the files no candidate may hold."""
    ids = {}
    with contextlib.suppress(OSError, TreeLimit):  # a task the lock could not read fails there
        for entry in walk(Path(task_dir), unreadable="skip"):
            if entry.is_file:
                ids[(entry.st.st_dev, entry.st.st_ino)] = entry.rel
    return ids


def check_tree(
    root: Path, limits: TreeLimits = NO_LIMITS, task_files: Mapping | None = None
) -> None:
    """Raise CandidateError unless root is a plain tree ringflow can copy and record.

    Folders, regular files and links to files inside the tree only; names that are
    plain text (docs/limits.md#names: a record never carries another name, the tree is
    refused with the name escaped); no deeper than MAX_SOLUTION_DEPTH levels or longer
    than MAX_SOLUTION_PATH; within `limits`; no file that is one of the task's
    (`task_files`, from task_file_ids): a hard link would copy the labels into the
    program's own folder. Read by descriptor, so no tree can make the check itself fail."""
    size = 0
    try:
        for entry in walk(root, max_entries=limits.max_files, max_depth=MAX_SOLUTION_DEPTH):
            rel = entry.rel
            if not is_plain_name(entry.name):
                raise CandidateError(f"{root}: the file name {rel} is not plain text (bytes "
                                     "that are not UTF-8, or control characters)")  # fmt: skip
            if len(rel) > MAX_SOLUTION_PATH:
                raise CandidateError(f"{root}: the path {rel[:80]}… is longer than "
                                     f"{MAX_SOLUTION_PATH} characters")  # fmt: skip
            if entry.is_link:
                _check_link(root, entry)
            elif entry.is_file:
                _check_not_the_tasks(root, entry, task_files)
                size += entry.st.st_size
                _check_size(root, entry, size, limits)
            elif not entry.is_dir:
                raise CandidateError(f"{root}: {rel} is not a file or folder "
                                     f"({_kind(entry.st.st_mode)})")  # fmt: skip
    except TreeLimit as exc:
        raise CandidateError(f"{root}: the tree has {exc.reason}") from None
    except OSError as exc:
        raise CandidateError(f"{root}: could not be read: {escape_name(str(exc))}") from None


def _check_not_the_tasks(root: Path, entry: Entry, task_files: Mapping | None) -> None:
    held = task_files.get((entry.st.st_dev, entry.st.st_ino)) if task_files else None
    if held is not None:
        raise CandidateError(f"{root}: {entry.rel} is the task's file {held} (a hard link): "
                             "a candidate holds files of its own only")  # fmt: skip


def _check_size(root: Path, entry: Entry, total: int, limits: TreeLimits) -> None:
    size = entry.st.st_size  # apparent: a sparse file counts at the size it claims
    if limits.max_file_bytes is not None and size > limits.max_file_bytes:
        raise CandidateError(f"{root}: {entry.rel} is {size} bytes, over the file size limit "
                             f"of {limits.max_file_bytes} bytes")  # fmt: skip
    if limits.max_bytes is not None and total > limits.max_bytes:
        raise CandidateError(f"{root}: the files hold more than {limits.max_bytes} bytes "
                             "together (the workspace limit)")  # fmt: skip


def _check_link(root: Path, entry: Entry) -> None:
    rel = entry.rel
    path = root.joinpath(*entry.parts)  # short: the depth and path length were checked
    target = Path(os.path.realpath(path))
    if not target.is_relative_to(os.path.realpath(root)):
        shown = escape_name(os.readlink(entry.name, dir_fd=entry.dir_fd))
        raise CandidateError(f"{root}: symlink {rel} leaves the solution tree (points to {shown})")
    try:
        st = os.stat(path)
    except OSError:
        raise CandidateError(f"{root}: symlink {rel} does not lead to a file (a loop, or "
                             "dangling)") from None  # fmt: skip
    if stat.S_ISDIR(st.st_mode):
        raise CandidateError(f"{root}: symlink {rel} points to a folder; link files only")
    if not stat.S_ISREG(st.st_mode):
        raise CandidateError(f"{root}: symlink {rel} points to something that is not a file")


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a file"


def _artifact_path(root: Path, raw: object, index: int) -> str:
    where = f"{root / 'ARTIFACTS.json'}: entry {index}"
    if not isinstance(raw, str) or not raw:
        raise CandidateError(f"{where}: 'path' must be a non-empty string")
    path = PurePosixPath(raw)
    if path.is_absolute():
        raise CandidateError(f"{where}: path {raw!r} is absolute; it must lie inside solution/")
    if ".." in path.parts:
        raise CandidateError(f"{where}: path {raw!r} contains '..'")
    if len(path.parts) < 2:
        raise CandidateError(
            f"{where}: path {raw!r} is a top-level file; per-view files must lie in a subfolder"
        )
    probe = root
    for part in path.parts:
        probe = probe / part
        if probe.is_symlink():
            raise CandidateError(f"{where}: path {raw!r} goes through the symlink {part!r}")
    return str(path)


def load_solution(
    solution_dir: str | Path,
    max_weights_bytes: int,
    limits: TreeLimits = NO_LIMITS,
    task_files: Mapping | None = None,
) -> Solution:
    """Check a solution folder; raise CandidateError with a specific message on bad input.
    The folder itself may be a link (a candidates folder of links to candidates); links
    inside it are checked as the tree's own, and its files against `task_files`."""
    root = Path(solution_dir).resolve()
    if not root.is_dir():
        raise CandidateError(f"{root}: not a folder")
    check_tree(root, limits, task_files)
    for name in ("EXECUTION.json", "ARTIFACTS.json"):
        if (root / name).is_file() and (root / name).stat().st_size > MAX_CONTRACT_BYTES:
            raise CandidateError(f"{root / name}: larger than {MAX_CONTRACT_BYTES} bytes")
    try:
        execution = read_json(root / "EXECUTION.json") if (root / "EXECUTION.json").exists() else {}
        artifacts = read_json(root / "ARTIFACTS.json") if (root / "ARTIFACTS.json").exists() else []
    except InputError as exc:
        raise CandidateError(str(exc)) from None
    if not isinstance(execution, dict):
        raise CandidateError(f"{root / 'EXECUTION.json'}: expected a JSON object")
    command = execution.get("command")
    if command is None:
        if not (root / "run.py").is_file():
            raise CandidateError(
                f"{root}: missing program: no run.py and no 'command' in EXECUTION.json"
            )
        command = ["python", "run.py"]
    elif isinstance(command, str):
        command = command.split()
    if not isinstance(command, list) or not command or not all(isinstance(c, str) for c in command):
        raise CandidateError(
            f"{root / 'EXECUTION.json'}: 'command' must be a non-empty list of strings"
        )
    seed_affects = execution.get("seed_affects_training", False)
    if not isinstance(seed_affects, bool):
        raise CandidateError(f"{root / 'EXECUTION.json'}: 'seed_affects_training' must be a bool")
    train_seed = execution.get("train_seed", 0)
    if not isinstance(train_seed, int) or isinstance(train_seed, bool):
        raise CandidateError(f"{root / 'EXECUTION.json'}: 'train_seed' must be an integer")
    train_seed_arg = execution.get("train_seed_arg", False)
    if not isinstance(train_seed_arg, bool):
        raise CandidateError(
            f"{root / 'EXECUTION.json'}: 'train_seed_arg' must be true or false, "
            f"got {train_seed_arg!r}"
        )
    if not isinstance(artifacts, list):
        raise CandidateError(f"{root / 'ARTIFACTS.json'}: expected a JSON list")
    per_view, fixed = [], []
    for index, entry in enumerate(artifacts):
        if not isinstance(entry, dict):
            raise CandidateError(f"{root / 'ARTIFACTS.json'}: entry {index} must be an object")
        path = _artifact_path(root, entry.get("path"), index)
        present = root / path
        if present.is_file() and present.stat().st_size > max_weights_bytes:
            raise CandidateError(
                f"{root}: weights file {path} is {present.stat().st_size} bytes, "
                f"over the limit of {max_weights_bytes} bytes"
            )
        # A declared file absent at submission becomes per-view (docs/contracts.md#candidate).
        if entry.get("per_view", False) or not present.exists():
            per_view.append(path)
        else:
            fixed.append(path)
    check_program(root, command)
    return Solution(
        dir=root,
        command=tuple(command),
        seed_affects_training=seed_affects,
        train_seed=train_seed,
        per_view_paths=tuple(sorted(set(per_view))),
        fixed_artifacts=tuple(sorted(fixed)),
        train_seed_arg=train_seed_arg,
    )


PYTHON_NAMES = ("python", "python3")
MAX_CONTRACT_BYTES = 1 << 20  # EXECUTION.json, ARTIFACTS.json


def entry_points(command: list[str]) -> list[str]:
    """The files of the solution a command names: its Python scripts and a relative program."""
    files = [arg for arg in command[1:] if arg.endswith(".py") and not arg.startswith("-")]
    first = command[0]
    if first not in PYTHON_NAMES and "/" in first and not first.startswith("/"):
        files.insert(0, first)
    return files


def check_program(root: Path, command: list[str]) -> None:
    """The program exists and compiles: a syntax error is a rejection at import, not four
    crashed executions later. Python entry points are compiled (nothing is written)."""
    for rel in entry_points(command):
        path = PurePosixPath(rel)
        if path.is_absolute() or ".." in path.parts:
            raise CandidateError(f"{root}: the command names {rel!r}, outside the solution")
        target = root / rel
        if not target.is_file():
            raise CandidateError(f"{root}: the command names {rel}, which is not in the solution")
        if not rel.endswith(".py"):
            if not os.access(target, os.X_OK):
                raise CandidateError(f"{root}: the command's program {rel} is not executable")
            continue
        try:
            compile(target.read_bytes(), str(target), "exec", dont_inherit=True)
        except SyntaxError as exc:
            where = f" (line {exc.lineno})" if exc.lineno else ""
            raise CandidateError(f"{target}: does not compile: {exc.msg}{where}") from None
        except ValueError as exc:
            raise CandidateError(f"{target}: does not compile: {exc}") from None


def copy_submission(solution: Solution, dest: Path) -> None:
    """Copy a solution as the node's submission: no per-view files, caches or progress.json."""
    skip = set(solution.per_view_paths) | {PROGRESS_FILE}
    for dirpath, dirnames, filenames in os.walk(solution.dir):
        rel_dir = Path(dirpath).relative_to(solution.dir)
        dirnames[:] = [d for d in dirnames if d not in CACHE_DIR_NAMES]
        for name in filenames:
            rel = (rel_dir / name).as_posix()
            if rel in skip or is_cache(rel):
                continue
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            # In-tree file links become plain copies: a submission is a plain tree.
            shutil.copy2(Path(dirpath) / name, target, follow_symlinks=True)


def runnable_problem(workspace: Path, max_bytes: int, limits: TreeLimits = NO_LIMITS):
    """(solution, None) when the workspace holds a runnable program, else (None, reason)."""
    try:
        solution = load_solution(workspace, max_bytes, limits)
    except CandidateError as exc:
        return None, str(exc)
    entry = workspace / "run.py"
    if list(solution.command[:2]) == ["python", "run.py"] and entry.is_file():
        try:
            compile(entry.read_bytes(), str(entry), "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as exc:
            return None, f"run.py does not compile: {exc}"
    return solution, None


def workspace_limits(ring: Ring) -> TreeLimits:
    """engineer.limits: what a session may leave in its workspace and submit."""
    limits = ring.config.engineer.limits
    return TreeLimits(
        max_files=limits.workspace_files,
        max_bytes=int(limits.workspace_gb * 1024**3),
        max_file_bytes=int(limits.file_mb * 1024**2),
    )
