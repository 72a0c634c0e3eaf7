"""Pieces of command lines shared by the probe and the plans."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
from collections.abc import Callable
from pathlib import Path, PurePosixPath

# Where the execution's folders appear inside the sandbox.
INSIDE = PurePosixPath("/ringflow")
# Host folders a program may read: the system and where toolkits are installed
# (docs/contracts.md#sandbox). Nothing else of the host is visible: not /home, /root, /srv, /mnt,
# /var, /run or /tmp.
SYSTEM_FOLDERS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "opt")
# Folders visible to executions given GPUs, read-only (the driver's user-space needs them).
GPU_FOLDERS = ("/sys", "/proc/driver/nvidia")


def drop_privileges_argv(setpriv: str, uid: int, gid: int) -> list[str]:
    """The setpriv prefix that runs the rest of argv as uid/gid without any capability."""
    return [
        setpriv,
        f"--reuid={uid}",
        f"--regid={gid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "--",
    ]


def limits_argv(prlimit: str | None, max_processes: int | None, max_file: int | None) -> list[str]:
    """The prlimit prefix that bounds processes and file size inside the sandbox.

    Run inside the user namespace (or after the uid drop), RLIMIT_NPROC counts only the
    sandbox's own processes there."""
    if prlimit is None or (max_processes is None and max_file is None):
        return []
    argv = [prlimit]
    if max_processes is not None:
        argv.append(f"--nproc={max_processes}")
    if max_file is not None:
        argv.append(f"--fsize={max_file}")
    return [*argv, "--"]


def system_argv(root: str = "/") -> list[str]:
    """Read-only binds of the system folders (symlinks recreated as symlinks)."""
    args: list[str] = []
    for name in SYSTEM_FOLDERS:
        host = os.path.join(root, name)
        if os.path.islink(host):
            args += ["--symlink", os.readlink(host), f"/{name}"]
        elif os.path.isdir(host):
            args += ["--ro-bind", host, f"/{name}"]
    return args


def base_argv(tmp_mb: int) -> list[str]:
    """Fresh /dev, /proc, size-limited /tmp and /dev/shm, and /ringflow."""
    size = str(int(tmp_mb) * 1024 * 1024)
    return [
        "--dev", "/dev",
        "--proc", "/proc",
        "--size", size, "--perms", "01777", "--tmpfs", "/tmp",
        "--size", size, "--perms", "01777", "--tmpfs", "/dev/shm",
        "--perms", "0755", "--dir", str(INSIDE),
    ]  # fmt: skip


def namespace_argv(userns: bool, network: bool, userns_fd: int | None = None) -> list[str]:
    """Namespaces: always pid, ipc and uts; the network unless asked for; user as non-root,
    and as root the run's own (`userns_fd`, sandbox/identity.py) where one is given.

    As root the capabilities are dropped by setpriv inside (it needs them to change uid);
    in a user namespace bubblewrap drops them itself."""
    args = ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if userns:
        args += ["--unshare-user", "--disable-userns", "--cap-drop", "ALL"]
    elif userns_fd is not None:
        args += ["--userns", str(userns_fd)]
    if not network:
        args.append("--unshare-net")
    return [*args, "--die-with-parent", "--new-session"]


def visible(path: Path) -> bool:
    """Whether a host path is already visible through a system folder bind."""
    parts = path.parts
    return len(parts) > 1 and parts[1] in SYSTEM_FOLDERS


def host_path_binds(paths: list[Path], mode: str = "--ro-bind") -> list[str]:
    """Bind each host path at the same path inside, making its missing parents 0755.

    Paths already visible through a system folder are skipped; one that lies inside
    another listed path is bound once, by the outer one.
    """
    args: list[str] = []
    made: set[PurePosixPath] = set()
    outer: list[Path] = []
    for path in sorted({Path(p) for p in paths}):
        if visible(path) or any(path.is_relative_to(o) for o in outer):
            continue
        outer.append(path)
        for parent in reversed(path.parents):
            pure = PurePosixPath(parent)
            if str(pure) == "/" or pure in made or visible(Path(parent)):
                continue
            args += ["--perms", "0755", "--dir", str(pure)]
            made.add(pure)
        args += [mode, str(path), str(path)]
    return args


def args_through_pipe(argv: list[str]) -> tuple[list[str], int]:
    """(short argv, fd): bwrap reads its options from the fd (`--args`); the command after
    `--` stays on the command line (bwrap takes it from there only).

    bubblewrap's own process is PID 1 in the sandbox and its command line is readable
    there (/proc/1/cmdline): given this way, it names no host path. The pipe is drained by
    bwrap before the program starts, so the fd it keeps open holds nothing either."""
    split = argv.index("--")
    data = b"".join(arg.encode() + b"\0" for arg in argv[1:split])
    read_fd, write_fd = os.pipe()
    try:
        if len(data) > 65536:
            fcntl.fcntl(write_fd, fcntl.F_SETPIPE_SZ, len(data))
        view = memoryview(data)
        while view:
            view = view[os.write(write_fd, view) :]
    except OSError:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)
    return [argv[0], "--args", str(read_fd), *argv[split:]], read_fd


KEYCTL = {"x86_64": 250, "aarch64": 219, "i686": 288, "armv7l": 311, "ppc64le": 271,
          "s390x": 280, "riscv64": 219}  # fmt: skip
KEYCTL_JOIN_SESSION_KEYRING = 1


def fresh_session_keyring_setup() -> Callable[[], None] | None:
    """What the starting thread does just before a run starts: join a new, empty session
    keyring, which the run inherits.

    Every process inherits its parent's session keyring and may use it (it possesses it),
    whatever its uid or user namespace: a ringflow started from a login session would hand
    that keyring to every run, a channel between them (docs/isolation.md). A keyring is a
    thread's credential, so the thread that starts the run joins one before each start: the
    next run gets another. Raises OSError where the kernel refuses; None where the
    machine's keyctl number is not known."""
    number = KEYCTL.get(os.uname().machine)
    if number is None:
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    syscall = libc.syscall
    syscall.restype = ctypes.c_long

    def join() -> None:
        if syscall(number, KEYCTL_JOIN_SESSION_KEYRING, None) >= 0:
            return
        err = ctypes.get_errno()
        if err == errno.ENOSYS:
            return
        raise OSError(err, f"cannot give the run a session keyring of its own: "
                           f"{os.strerror(err)}")  # fmt: skip

    return join
