"""Plan a run without bubblewrap: only the uid drop confines the program.

The program still runs as the sandbox uid without capabilities, sees a
read-only staged working copy, and must find labels and the store unreadable
(checked for real, as that uid). Only network isolation is lost.

Stage layout (one per execution, under a 0711 staging root):
    solution/  root-owned mirror; progress file and writable weights folders lent to the uid
    inputs/    root-owned mirror of the view's inputs
    output/    owned by the uid; moved back into the real output folder by finish()
    home/      owned by the uid; HOME and TMPDIR
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ringflow.errors import SandboxError
from ringflow.sandbox.as_user import attempt_as_user, describe_owner, first_untraversable
from ringflow.sandbox.commands import drop_privileges_argv
from ringflow.sandbox.layout import Layout
from ringflow.sandbox.model import SandboxPlan, SandboxRequest
from ringflow.sandbox.ownership import OwnershipLoan, refuse_shared_inodes
from ringflow.sandbox.program_env import drop_untouched_progress, ensure_progress_file, program_env
from ringflow.sandbox.staging import Stager, ensure_staging_root, move_contents, remove_tree

# How many files of a hidden folder are tried by name, beyond listing it.
HIDDEN_FILES_TRIED = 20


def default_staging_root() -> Path:
    """/tmp/ringflow-stage-<uid of ringflow>: reachable by the sandbox user, one per owner."""
    return Path(tempfile.gettempdir()) / f"ringflow-stage-{os.geteuid()}"


def plan_user_only(
    request: SandboxRequest,
    layout: Layout,
    program_argv: list[str],
    base_env: dict[str, str],
    info: dict,
) -> SandboxPlan:
    """Check the hidden paths, stage the execution's folders and build the setpriv argv."""
    notes = [
        f"bubblewrap unavailable ({info['bwrap_reason']}): the program runs as uid "
        f"{request.uid} only; network isolation lost"
    ]
    notes += _check_hidden(request, layout)
    for path in [layout.progress, *(layout.solution / rel for rel in layout.writable_rels)]:
        if path.exists():
            refuse_shared_inodes(path)  # before anything changes

    root = ensure_staging_root(request.staging_root or default_staging_root())
    stage = Path(tempfile.mkdtemp(prefix="exec-", dir=root))
    loan = OwnershipLoan(request.uid, request.gid)
    created_progress = False
    try:
        os.chmod(stage, 0o755)
        created_progress = ensure_progress_file(layout.progress)
        progress_linked = _stage(request, layout, stage, loan)
        blocked = first_untraversable(request.uid, request.gid, stage / "solution", True)
        if blocked is not None:
            raise SandboxError(
                f"staging root {root} is out of reach of uid {request.uid}: folder {blocked} "
                f"is not traversable ({describe_owner(blocked)})"
            )
    except BaseException:
        loan.take_back()
        remove_tree(stage)
        drop_untouched_progress(layout.progress, created_progress)
        raise
    if not progress_linked:
        notes.append("progress file staged as a copy (other filesystem): seen only after the run")

    def bring_back() -> list[str]:
        try:
            move_contents(stage / "output", layout.output, mirror=False)
            for rel in layout.writable_rels:
                move_contents(stage / "solution" / rel, layout.solution / rel, mirror=True)
            if not progress_linked:
                _copy_bytes_back(stage / "solution" / layout.progress_rel, layout.progress)
        except Exception as exc:
            loan.take_back()
            raise SandboxError(
                f"could not bring the results back from {stage} (kept for inspection): {exc}"
            ) from exc
        notes = loan.take_back()
        remove_tree(stage)
        drop_untouched_progress(layout.progress, created_progress)
        return notes

    weights = layout.writable_rels[0] if layout.writable_rels else layout.weights_rel
    staged_solution = stage / "solution"
    env = program_env(
        base_env,
        inputs=stage / "inputs",
        output=stage / "output",
        progress=staged_solution / layout.progress_rel,
        weights=None if weights is None else staged_solution / weights,
        home=stage / "home",
    )
    return SandboxPlan(
        mode="user-only",
        argv=drop_privileges_argv(info["setpriv"], request.uid, request.gid) + program_argv,
        env=env,
        cwd=str(staged_solution),
        network_isolated=False,
        notes=notes,
        _cleanups=[bring_back],
    )


def _stage(request: SandboxRequest, layout: Layout, stage: Path, loan: OwnershipLoan) -> bool:
    """Fill the stage; True when the progress file is the real one (hard link)."""
    stager = Stager(request.uid, request.gid)
    skip = {layout.progress_rel, *layout.writable_rels}
    stager.mirror_read_only(layout.solution, stage / "solution", skip)
    stager.mirror_read_only(layout.inputs, stage / "inputs", set())
    for rel in layout.writable_rels:
        (stage / "solution" / rel).parent.mkdir(parents=True, exist_ok=True)
        stager.copy_owned(layout.solution / rel, stage / "solution" / rel)
    for name in ("output", "home"):
        os.mkdir(stage / name, 0o700)
        os.chown(stage / name, request.uid, request.gid)
    loan.adopt(layout.output)
    for rel in layout.writable_rels:
        loan.adopt(layout.solution / rel)

    # Lent first (its single link is checked there); a link then shares the loaned inode.
    loan.lend(layout.progress)
    staged_progress = stage / "solution" / layout.progress_rel
    staged_progress.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(layout.progress, staged_progress)
        linked = True
    except OSError:
        os.close(os.open(staged_progress, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        staged_progress.write_bytes(layout.progress.read_bytes())
        linked = False
    if not linked:
        os.chown(staged_progress, request.uid, request.gid)
    return linked


def _copy_bytes_back(source: Path, target: Path) -> None:
    """Copy a staged file's bytes back over the real one (keeping the real inode)."""
    if source.is_file() and not source.is_symlink():
        target.write_bytes(source.read_bytes())


def _check_hidden(request: SandboxRequest, layout: Layout) -> list[str]:
    """Try each hidden path as the sandbox uid; refuse (or note) whatever it can read."""
    checks: list[tuple[str, str]] = []
    for path in layout.hidden:
        if path.is_dir():
            checks.append(("list", str(path)))
            for file in _some_files(path, HIDDEN_FILES_TRIED):
                checks.append(("open", str(file)))
        else:
            checks.append(("open", str(path)))
    answers = attempt_as_user(request.uid, request.gid, checks)
    readable = [path for (_, path), answer in zip(checks, answers, strict=True) if answer is None]
    if not readable:
        return []
    listed = ", ".join(readable[:5]) + (" ..." if len(readable) > 5 else "")
    message = (
        f"hidden paths are readable by the sandbox user (uid {request.uid}) and bubblewrap is "
        f"unavailable to hide them: {listed}"
    )
    if not request.allow_readable_hidden:
        raise SandboxError(message + "; make them unreadable to that uid (for example mode 0700)")
    return [message]


def _some_files(folder: Path, limit: int) -> list[Path]:
    found: list[Path] = []
    for dirpath, _, filenames in os.walk(folder):
        for name in filenames:
            found.append(Path(dirpath, name))
            if len(found) >= limit:
                return found
    return found
