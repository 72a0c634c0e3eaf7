"""Plan a bubblewrap sandbox for one program (docs/contracts.md#sandbox).

As root, bwrap runs as root in the run's own user namespace (so it can bind folders from
anywhere) and setpriv drops to the sandbox uid with no capabilities inside; that uid is a
host uid of the run's own (sandbox/identity.py). As an ordinary user, bwrap makes a user
namespace: the program keeps the user's uid and holds no capability on the host. Either
way the program sees the system folders, its interpreter's environment and the declared
mounts read-only at their host paths, and its own folders under /ringflow; nothing else.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path, PurePosixPath

from ringflow.core.errors import SandboxError
from ringflow.sandbox.commands import (
    GPU_FOLDERS,
    INSIDE,
    args_through_pipe,
    base_argv,
    drop_privileges_argv,
    fresh_session_keyring_setup,
    host_path_binds,
    limits_argv,
    namespace_argv,
    system_argv,
    visible,
)
from ringflow.sandbox.identity import USER_NAMESPACE, RunIdentity, claim_identity
from ringflow.sandbox.layout import Layout
from ringflow.sandbox.model import SandboxPlan, SandboxRequest
from ringflow.sandbox.ownership import OwnershipLoan, refuse_shared_inodes
from ringflow.sandbox.program_env import drop_untouched_progress, ensure_progress_file, program_env

INSIDE_SOLUTION = INSIDE / "solution"
INSIDE_INPUTS = INSIDE / "inputs"
INSIDE_OUTPUT = INSIDE / "output"


def plan_box(
    request: SandboxRequest,
    layout: Layout,
    program_argv: list[str],
    base_env: dict[str, str],
    info: dict,
) -> SandboxPlan:
    """Build the bwrap argv; as root, lend the writable paths to the run's host uid."""
    identity = claim_identity(info, request.uid, request.gid, request.host_uids)
    try:
        return _plan_box(request, layout, program_argv, base_env, info, identity)
    except BaseException:
        identity.close()
        raise


def _plan_box(request, layout, program_argv, base_env, info, identity) -> SandboxPlan:
    root = info["mode"] == "root"
    bound = [*request.environment_dirs, *request.mounts]
    argv = sandbox_head(info, network=request.network, tmp_mb=request.tmp_mb, bound=bound,
                        hidden=layout.hidden, identity=identity)  # fmt: skip
    argv += _execution_binds(layout)
    argv += _gpu_binds(request.gpu_devices)
    tail, read_status, write_status = sandbox_tail(
        info, INSIDE_SOLUTION, uid=request.uid, gid=request.gid,
        max_processes=request.max_processes, max_file_bytes=request.max_file_bytes,
    )  # fmt: skip
    argv += tail + program_argv

    cleanups = []
    if root:
        try:
            cleanups.append(_lend_writable(identity, layout))
        except BaseException:
            os.close(read_status)
            os.close(write_status)
            raise
    else:
        created = ensure_progress_file(layout.progress)
        cleanups.append(lambda: drop_untouched_progress(layout.progress, created))

    weights = layout.writable_rels[0] if layout.writable_rels else layout.weights_rel
    env = program_env(
        base_env,
        inputs=INSIDE_INPUTS,
        output=INSIDE_OUTPUT,
        progress=INSIDE_SOLUTION / layout.progress_rel,
        weights=None if weights is None else INSIDE_SOLUTION / weights,
        home=PurePosixPath("/tmp"),
    )
    return confined_plan(info, argv, env, identity, network_isolated=not request.network,
                         status=(read_status, write_status), cleanups=cleanups)  # fmt: skip


def confined_plan(
    info: dict,
    argv: list[str],
    env: dict[str, str],
    identity: RunIdentity,
    *,
    network_isolated: bool,
    status: tuple[int, int],
    cleanups: list,
) -> SandboxPlan:
    """The plan that starts bwrap with `argv` given through a pipe; finish() releases the
    identity after the other cleanups (the loan goes back from its host uid first)."""
    read_status, write_status = status
    try:
        short, args_fd = args_through_pipe(argv)
    except OSError as exc:
        os.close(read_status)
        os.close(write_status)
        raise SandboxError(f"cannot hand bubblewrap its arguments: {exc}") from None
    own = (identity.userns_fd, identity.seccomp_fd)
    fds = [fd for fd in (write_status, *own, args_fd) if fd is not None]
    return SandboxPlan(
        mode=info["mode"],
        argv=short,
        spawn_setup=fresh_session_keyring_setup(),
        env=env,
        cwd="/",
        network_isolated=network_isolated,
        notes=[],
        wrappers=[info["bwrap_path"]],
        status_fd=write_status,
        isolation=identity.record(),
        extra_fds=[fd for fd in fds if fd != write_status],
        _status_read=read_status,
        _owned_fds=[args_fd],
        _cleanups=[*cleanups, identity.close],
    )


def sandbox_head(
    info: dict,
    *,
    network: bool,
    tmp_mb: int,
    bound: list[Path],
    hidden: tuple[Path, ...],
    identity: RunIdentity | None = None,
) -> list[str]:
    """bwrap with its namespaces, the system folders, fresh /dev /proc /tmp, the read-only
    host binds (`bound`: an environment, mounts) and the hidden paths they would show.
    What the sandbox is for (an execution, an engineer session) is bound after it."""
    root = info["mode"] == "root"
    userns_fd = identity.userns_fd if identity is not None else None
    argv = [info["bwrap_path"], *namespace_argv(userns=not root, network=network,
                                                userns_fd=userns_fd)]  # fmt: skip
    if identity is not None and identity.seccomp_fd is not None:
        argv += ["--seccomp", str(identity.seccomp_fd)]
    argv += system_argv() + base_argv(tmp_mb)
    argv += host_path_binds(list(bound))
    return argv + _hide(tuple(hidden), list(bound))


def sandbox_tail(
    info: dict,
    chdir: PurePosixPath,
    *,
    uid: int,
    gid: int,
    max_processes: int | None,
    max_file_bytes: int | None,
) -> tuple[list[str], int, int]:
    """(argv, read fd, write fd): the working folder, the started marker on the write fd
    (pass it to the child), the uid drop as root, and the limits; the command follows."""
    root = info["mode"] == "root"
    read_status, write_status = os.pipe()
    write_status = _low_fd(write_status)
    os.set_inheritable(write_status, True)
    argv = ["--chdir", str(chdir), "--", *started_marker_argv(write_status)]
    if root:
        argv += drop_privileges_argv(info["setpriv"], uid, gid)
    # RLIMIT_NPROC counts a uid's processes in its user namespace: in a run's own namespace
    # (bubblewrap's, or as root ours with a host uid of its own) that is this sandbox alone.
    # Runs that share one uid (no namespace could be had) leave it to the supervisor's
    # pids cgroup.
    own = not root or info.get("kernel_state", USER_NAMESPACE) == USER_NAMESPACE
    nproc = max_processes if own else None
    return argv + limits_argv(info["prlimit"], nproc, max_file_bytes), read_status, write_status


def started_marker_argv(fd: int) -> list[str]:
    """A shell that reports on fd that the sandbox is set up, closes it, and execs the rest.

    bubblewrap's own status reports a child before its mounts are made; only a process
    that runs inside the finished sandbox can say that set-up worked, and a program
    cannot fake it: when set-up fails, no program runs. A POSIX shell redirects only fds
    0-9; a higher one is written through /proc and left to the program, which can only
    write more to a report that already says "started"."""
    if fd <= 9:
        script = f'printf started >&{fd}; exec {fd}>&-; exec "$@"'
    else:
        script = f'printf started > /proc/self/fd/{fd}; exec "$@"'
    return ["/bin/sh", "-c", script, "sh"]


def _low_fd(fd: int) -> int:
    """fd moved to a free number below 10 where one is free (see started_marker_argv)."""
    for candidate in range(3, 10):
        try:
            fcntl.fcntl(candidate, fcntl.F_GETFD)
        except OSError:
            os.dup2(fd, candidate, inheritable=False)
            os.close(fd)
            return candidate
    return fd


def _lend_writable(identity: RunIdentity, layout: Layout):
    """Root mode: what the program writes must belong to the run's host uid during the run."""
    lent = [layout.output, *(layout.solution / rel for rel in layout.writable_rels)]
    for path in [*lent, layout.progress]:
        if path.exists():
            refuse_shared_inodes(path)  # before anything changes
    loan = OwnershipLoan(identity.host_uid, identity.host_gid)
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

    return give_back


def _hide(hidden: tuple[Path, ...], bound: list[Path]) -> list[str]:
    """An empty tmpfs over each hidden folder that a system folder or a bind would show."""
    args: list[str] = []
    for path in hidden:
        if not visible(path) and not any(path.is_relative_to(b) for b in bound):
            continue  # never bound: nothing to hide
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


def _gpu_binds(devices: tuple[tuple[str, str], ...]) -> list[str]:
    """The GPUs' device nodes (host path, path inside), and the driver's read-only view
    of the system; nothing of the GPUs for an execution that was given none."""
    if not devices:
        return []
    args: list[str] = []
    for folder in GPU_FOLDERS:
        if os.path.isdir(folder):
            args += ["--ro-bind", folder, folder]
    for host, inside in devices:
        if not os.path.exists(host):
            raise SandboxError(f"GPU device node {host} does not exist")
        args += ["--dev-bind", host, inside]
    return args
