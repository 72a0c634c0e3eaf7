"""Plan a bubblewrap sandbox: root binds what it must, the program runs as the sandbox uid.

bwrap runs as root so it can bind folders that the sandbox user could never
traverse (a ring under a private 0700 folder); inside, setpriv drops to the
uid with no capabilities left (as root, the program could otherwise remount
/ read-write). The execution's folders appear under /ringflow.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from ringflow.errors import SandboxError
from ringflow.sandbox.as_user import describe_owner, first_untraversable, unreadable_by_bits
from ringflow.sandbox.commands import INSIDE, bwrap_root_argv, drop_privileges_argv
from ringflow.sandbox.layout import Layout
from ringflow.sandbox.model import SandboxPlan, SandboxRequest
from ringflow.sandbox.ownership import OwnershipLoan, refuse_shared_inodes
from ringflow.sandbox.probe import interpreter_paths
from ringflow.sandbox.program_env import drop_untouched_progress, ensure_progress_file, program_env

INSIDE_SOLUTION = INSIDE / "solution"
INSIDE_INPUTS = INSIDE / "inputs"
INSIDE_OUTPUT = INSIDE / "output"


def plan_bwrap(
    request: SandboxRequest,
    layout: Layout,
    program_argv: list[str],
    program_path: Path,
    base_env: dict[str, str],
    info: dict,
    reach: list[str] | None = None,
) -> SandboxPlan:
    """Build the bwrap argv and lend the writable paths to the sandbox uid.

    `reach` holds the binds (from interpreter_binds) that make the interpreter reachable.
    """
    for folder, what in ((layout.solution, "working copy"), (layout.inputs, "inputs")):
        unreadable = unreadable_by_bits(folder, request.uid, request.gid)
        if unreadable:
            listed = ", ".join(f"{p} ({describe_owner(p)})" for p in unreadable)
            raise SandboxError(
                f"the {what} must be readable by uid {request.uid} inside the sandbox; "
                f"not readable: {listed}"
            )
    argv = [info["bwrap_path"], *bwrap_root_argv(), *(reach or []), *_hide(layout.hidden)]
    argv += _execution_binds(layout)
    argv += ["--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    if request.blind:
        argv.append("--unshare-net")
    argv += ["--die-with-parent", "--new-session", "--chdir", str(INSIDE_SOLUTION), "--"]
    argv += drop_privileges_argv(info["setpriv"], request.uid, request.gid) + program_argv

    lent = [layout.output, *(layout.solution / rel for rel in layout.writable_rels)]
    for path in [*lent, layout.progress]:
        if path.exists():
            refuse_shared_inodes(path)  # before anything changes
    loan = OwnershipLoan(request.uid, request.gid)
    created_progress = ensure_progress_file(layout.progress)
    try:
        for path in [*lent, layout.progress]:
            loan.lend(path)
    except BaseException:
        loan.take_back()
        drop_untouched_progress(layout.progress, created_progress)
        raise

    def give_back() -> list[str]:
        notes = loan.take_back()
        drop_untouched_progress(layout.progress, created_progress)
        return notes

    weights = layout.writable_rels[0] if layout.writable_rels else layout.weights_rel
    env = program_env(
        base_env,
        inputs=INSIDE_INPUTS,
        output=INSIDE_OUTPUT,
        progress=INSIDE_SOLUTION / layout.progress_rel,
        weights=None if weights is None else INSIDE_SOLUTION / weights,
        home=PurePosixPath("/tmp"),
    )
    return SandboxPlan(
        mode="bwrap",
        argv=argv,
        env=env,
        cwd="/",
        network_isolated=request.blind,
        notes=[],
        wrappers=[info["bwrap_path"]],
        _cleanups=[give_back],
    )


def _hide(hidden: tuple[Path, ...]) -> list[str]:
    """An empty tmpfs over each hidden folder, /dev/null over each hidden file."""
    args: list[str] = []
    for path in hidden:
        if path.is_relative_to("/tmp") or path.parts[1:2] in (("proc",), ("dev",)):
            continue  # already replaced by a fresh mount
        if path == Path("/"):
            raise SandboxError("cannot hide / itself")
        if path.is_dir():
            args += ["--tmpfs", str(path)]
        else:
            args += ["--ro-bind", "/dev/null", str(path)]
    return args


def _execution_binds(layout: Layout) -> list[str]:
    args = ["--ro-bind", str(layout.solution), str(INSIDE_SOLUTION)]
    args += ["--bind", str(layout.progress), str(INSIDE_SOLUTION / layout.progress_rel)]
    for rel in layout.writable_rels:
        args += ["--bind", str(layout.solution / rel), str(INSIDE_SOLUTION / rel)]
    args += ["--ro-bind", str(layout.inputs), str(INSIDE_INPUTS)]
    args += ["--bind", str(layout.output), str(INSIDE_OUTPUT)]
    return args


# Host folders the sandbox replaces with fresh, empty mounts.
REPLACED_MOUNTS = (Path("/tmp"), Path("/dev/shm"))


def interpreter_binds(program: Path, uid: int, gid: int) -> list[str] | None:
    """Binds that make the interpreter reachable for uid inside the sandbox, or None.

    Two cases need them. An install under a folder the sandbox replaces (a virtual
    environment in a checkout under /tmp) is bound back, read-only, at its own path. An
    install under a private host folder (pyenv under /root, mode 0700) gets that folder
    replaced by an empty 0755 tmpfs holding a read-only bind of just the subtree the
    interpreter lives in; the rest of the folder stays unseen. None when a folder further
    down is private too: nothing short of moving the interpreter helps then.
    """
    args: list[str] = []
    covered: set[Path] = set()

    def bind(path: Path) -> None:
        if path in covered:
            return
        # bwrap would make missing parents inside a fresh mount mode 0700: make them first.
        mount = next((m for m in REPLACED_MOUNTS if path.is_relative_to(m)), None)
        if mount is not None:
            for parent in reversed(path.parents):
                if parent.is_relative_to(mount) and parent != mount and parent not in covered:
                    args.extend(["--perms", "0755", "--dir", str(parent)])
                    covered.add(parent)
        args.extend(["--ro-bind", str(path), str(path)])
        covered.add(path)

    for needed in interpreter_paths(program):
        real = Path(os.path.realpath(needed))
        for path in {needed, real}:
            if any(path.is_relative_to(mount) for mount in REPLACED_MOUNTS):
                # The install's root: the venv or prefix above bin/ or lib/.
                bind(path.parent.parent if path == needed and needed == program else path.parent)
        blocked = first_untraversable(uid, gid, needed, include_self=needed.is_dir())
        if blocked is None:
            continue
        if real == blocked or not real.is_relative_to(blocked):
            return None
        subtree = blocked / real.relative_to(blocked).parts[0]
        if blocked not in covered:
            args += ["--perms", "0755", "--tmpfs", str(blocked)]
            covered.add(blocked)
        bind(subtree)
        chain = [subtree, *(p for p in real.parents if p.is_relative_to(subtree))]
        if any(not _traversable_by_bits(p, uid, gid) for p in chain if p.is_dir()):
            return None
    return args


def _traversable_by_bits(folder: Path, uid: int, gid: int) -> bool:
    st = folder.stat()
    if st.st_uid == uid:
        return bool(st.st_mode & 0o100)
    if st.st_gid == gid:
        return bool(st.st_mode & 0o010)
    return bool(st.st_mode & 0o001)
