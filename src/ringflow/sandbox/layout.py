"""Check a SandboxRequest and resolve its paths before anything is changed."""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath

from ringflow.core.errors import SandboxError
from ringflow.sandbox.model import SandboxRequest

from ..core.frozen import Frozen, frozen_record


@frozen_record
class Layout(Frozen):
    """The request's paths, resolved and checked; relative ones are inside the working copy."""

    solution: Path
    inputs: Path
    output: Path
    progress: Path
    progress_rel: PurePosixPath
    writable_rels: tuple[PurePosixPath, ...]
    weights_rel: PurePosixPath | None
    hidden: tuple[Path, ...]  # existing ones only, none inside another


def resolve_layout(
    request: SandboxRequest, program_argv: list[str], weights_dir_rel: str | None
) -> Layout:
    """Validate the request; raise SandboxError naming the first bad path."""
    if not program_argv or not all(isinstance(arg, str) for arg in program_argv):
        raise SandboxError(f"program argv must be a non-empty list of strings: {program_argv!r}")
    for name in ("uid", "gid"):
        value = getattr(request, name)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise SandboxError(f"sandbox {name} must be a positive integer (not root): {value!r}")
    solution = _existing_folder(request.solution_dir, "solution working copy")
    inputs = _existing_folder(request.input_dir, "inputs folder")
    output = _existing_folder(request.output_dir, "output folder")
    progress_rel = _inside(solution, request.progress_file, "progress file")
    progress = solution / progress_rel
    if os.path.lexists(progress):
        st = progress.lstat()
        if not stat.S_ISREG(st.st_mode):
            raise SandboxError(f"progress file {progress} must be a regular file (not a link)")
    writable_rels = []
    for folder in request.writable_dirs:
        rel = _inside(solution, folder, "writable folder")
        if not (solution / rel).is_dir() or _has_symlink(solution, rel):
            raise SandboxError(f"writable folder {solution / rel} must be a real folder")
        writable_rels.append(rel)
    for rel in writable_rels:
        if progress_rel.is_relative_to(rel):
            raise SandboxError(f"progress file {progress} lies inside writable folder {rel}")
    weights_rel = None
    if weights_dir_rel is not None:
        weights_rel = PurePosixPath(weights_dir_rel)
        if weights_rel.is_absolute() or ".." in weights_rel.parts or not weights_rel.parts:
            raise SandboxError(f"weights folder {weights_dir_rel!r} must be relative, without '..'")
    return Layout(
        solution=solution,
        inputs=inputs,
        output=output,
        progress=progress,
        progress_rel=progress_rel,
        writable_rels=tuple(writable_rels),
        weights_rel=weights_rel,
        hidden=_outermost_existing(request.hidden_paths),
    )


def _existing_folder(path: Path, what: str) -> Path:
    resolved = Path(os.path.realpath(path))
    if not resolved.is_dir():
        raise SandboxError(f"{what} {path} does not exist or is not a folder")
    return resolved


def _inside(solution: Path, path: Path, what: str) -> PurePosixPath:
    """path relative to solution: it must lie strictly inside it."""
    parent = Path(os.path.realpath(Path(path).parent))
    candidate = parent / Path(path).name
    try:
        rel = PurePosixPath(candidate.relative_to(solution))
    except ValueError:
        raise SandboxError(f"{what} {path} is not inside the working copy {solution}") from None
    if not rel.parts or rel.name in ("", ".", ".."):
        raise SandboxError(f"{what} {path} is not inside the working copy {solution}")
    return rel


def _has_symlink(solution: Path, rel: PurePosixPath) -> bool:
    current = solution
    for part in rel.parts:
        current = current / part
        if current.is_symlink():
            return True
    return False


def _outermost_existing(paths: tuple[Path, ...]) -> tuple[Path, ...]:
    """Existing hidden paths, resolved, dropping any that lies inside another."""
    resolved = sorted({Path(os.path.realpath(p)) for p in paths if os.path.lexists(p)})
    kept: list[Path] = []
    for path in resolved:
        if not any(path.is_relative_to(outer) for outer in kept):
            kept.append(path)
    return tuple(kept)
