"""Who a confined run is on the host, and the kernel state it keeps to itself.

As an ordinary user, bubblewrap makes a user namespace for every run. As root, a run
dropped to one shared uid in the initial namespace would share that uid's keyrings and
everything else the kernel keeps per uid; so every root-mode run gets a user namespace of
its own and a host uid no other run holds while it runs, claimed from `sandbox.host_uids`
under a lock. Inside, the program still is `sandbox.uid`: the namespace maps that uid to
the claimed host uid (and back), every other id to itself, and allows no nested user
namespace. See docs/isolation.md.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from ringflow.core.errors import SandboxError
from ringflow.core.settings import HostUids
from ringflow.sandbox import seccomp

HOST_UIDS = {"first": 1879048192, "count": 65536}
ID_LIMIT = 4294967295  # ids are 0 .. 2**32 - 2
USER_NAMESPACE = "user-namespace"
SECCOMP = "seccomp"  # no namespace: the keyring calls are refused instead
SHARED_UID = "shared-uid"  # neither: recorded on every result
MAKER_TIMEOUT_S = 20

CLONE_NEWUSER = 0x10000000
MAX_USER_NAMESPACES = "/proc/sys/user/max_user_namespaces"


@dataclass
class RunIdentity:
    """One run's ids (inside and on the host) and, as root, its user namespace's fd."""

    uid: int  # what the program is inside
    gid: int
    host_uid: int  # who owns what it writes, on the host
    host_gid: int
    isolation: str  # USER_NAMESPACE, SECCOMP, SHARED_UID, "none" for sandbox.mode none
    userns_fd: int | None = None
    seccomp_fd: int | None = None  # for bwrap --seccomp
    why: str | None = None  # why no namespace could be had
    _lock_fd: int | None = field(default=None, repr=False)

    def record(self) -> dict:
        """What result.json says about it."""
        record = {"kernel_state": self.isolation, "host_uid": self.host_uid}
        return record if self.why is None else {**record, "kernel_state_why": self.why}

    def close(self) -> None:
        """Release the namespace and the host uid; idempotent."""
        for name in ("userns_fd", "seccomp_fd", "_lock_fd"):
            fd = getattr(self, name)
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
                setattr(self, name, None)


def claim_identity(
    info: dict, uid: int, gid: int, host_uids: HostUids | None = None
) -> RunIdentity:
    """The identity of one run under `info` (what `require_sandbox` returned).

    In user-namespace mode the program is this user, in a namespace bubblewrap makes. As
    root: a free host uid from `host_uids` ({first, count}), held until close(), and a
    fresh user namespace mapping uid/gid to it. SandboxError when none can be had."""
    if info["mode"] != "root":
        own = os.getuid(), os.getgid()
        return RunIdentity(uid, gid, *own, isolation=USER_NAMESPACE if info["mode"] else "none")
    state = info.get("kernel_state", USER_NAMESPACE)
    if state != USER_NAMESPACE:
        # No namespace can be had here (the probe said why): the runs share uid, so the
        # keyring calls are refused where a filter can be built; recorded either way.
        why = info.get("kernel_state_why")
        if state == SECCOMP:
            return RunIdentity(uid, gid, uid, gid, SECCOMP, seccomp_fd=seccomp.filter_fd(),
                               why=why)  # fmt: skip
        return RunIdentity(uid, gid, uid, gid, isolation=state, why=why)
    first, count = _range(host_uids, uid, gid)
    host, lock_fd = _claim_host_uid(first, count)
    try:
        fd = new_user_namespace(uid, gid, host)
    except BaseException:
        os.close(lock_fd)
        raise
    return RunIdentity(uid, gid, host, host, USER_NAMESPACE, userns_fd=fd, _lock_fd=lock_fd)


def _range(host_uids: HostUids | None, uid: int, gid: int) -> tuple[int, int]:
    if host_uids is None:
        first, count = HOST_UIDS["first"], HOST_UIDS["count"]
    else:
        first, count = int(host_uids.first), int(host_uids.count)
    if count < 1 or first <= max(uid, gid) or first + count >= ID_LIMIT:
        raise SandboxError(
            f"sandbox.host_uids {{'first': {first}, 'count': {count}}} must be a range of "
            f"at least one id above sandbox.uid/gid ({uid}/{gid}) and below {ID_LIMIT}"
        )
    return first, count


def lock_dir() -> Path:
    """One per machine: host uids are the machine's, whatever the ring. Under /run, where
    no other user can make the folder first; /tmp where there is no /run."""
    if os.environ.get("RINGFLOW_UID_LOCKS"):
        return Path(os.environ["RINGFLOW_UID_LOCKS"])
    base = "/run" if os.access("/run", os.W_OK) else "/tmp"
    return Path(base) / "ringflow-host-uids"


def _claim_host_uid(first: int, count: int) -> tuple[int, int]:
    """A host uid no live run holds, and the fd whose lock holds it.

    The search starts at a random place, so that a run seldom gets the uid the run before
    it had (nothing of that run is left to share: its namespace, keyrings and processes
    are gone, and its files went back to their owner)."""
    folder = lock_dir()
    folder.mkdir(mode=0o700, exist_ok=True)
    if folder.is_symlink() or folder.stat().st_uid != os.geteuid():
        raise SandboxError(f"{folder} must be a folder of this user's (it holds the uid locks)")
    start = int.from_bytes(os.urandom(4), "big") % count
    for step in range(count):
        host = first + (start + step) % count
        fd = os.open(folder / str(host), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return host, fd
    raise SandboxError(f"all {count} host uids of sandbox.host_uids are held by running runs")


def id_map(inside: int, host: int) -> str:
    """Every id to itself, except `inside` and `host`, which trade places."""
    assert inside < host
    return (
        f"0 0 {inside}\n{inside} {host} 1\n{inside + 1} {inside + 1} {host - inside - 1}\n"
        f"{host} {inside} 1\n{host + 1} {host + 1} {ID_LIMIT - host - 1}\n"
    )


def new_user_namespace(uid: int, gid: int, host: int) -> int:
    """An fd of a new user namespace (root only) where uid/gid are host; for bwrap --userns.

    A forked child of this process makes the namespace, waits until its maps are written,
    forbids further user namespaces there (the limit is that namespace's own) and stays
    until told; the namespace outlives it through the fd. A fork, not a new interpreter:
    every root-mode run and its scoring make one, and an interpreter's start cost more
    than the rest of the sandbox's set-up."""
    import ctypes

    unshare = ctypes.CDLL(None, use_errno=True).unshare
    said_r, said_w = os.pipe()
    go_r, go_w = os.pipe()
    try:
        pid = os.fork()
    except OSError as exc:
        for fd in (said_r, said_w, go_r, go_w):
            os.close(fd)
        raise SandboxError(f"cannot start what makes the user namespace: {exc}") from None
    if pid == 0:  # the child never returns into the caller's code
        code = 1
        try:
            os.close(said_r)
            os.close(go_w)
            failed = unshare(CLONE_NEWUSER)
            os.write(said_w, f"{'fail' if failed else 'ok'} {ctypes.get_errno()}\n".encode())
            if not failed and os.read(go_r, 1) == b"g":
                with open(MAX_USER_NAMESPACES, "w") as limit:
                    limit.write("0")
                os.write(said_w, b"ok\n")
                os.read(go_r, 1)  # end of file once the caller holds the fd
                code = 0
        finally:
            os._exit(code)
    os.close(said_w)
    os.close(go_r)
    try:
        said = _read_line(said_r).split()
        if said[:1] != ["ok"]:
            errno = int(said[1]) if len(said) > 1 else 0
            raise SandboxError(f"cannot make a user namespace: {os.strerror(errno)}")
        proc = Path(f"/proc/{pid}")
        (proc / "uid_map").write_text(id_map(uid, host))
        (proc / "gid_map").write_text(id_map(gid, host))
        os.write(go_w, b"g")
        if _read_line(said_r).strip() != "ok":
            raise SandboxError("cannot forbid nested user namespaces in the run's namespace")
        return os.open(proc / "ns" / "user", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise SandboxError(f"cannot set up the run's user namespace: {exc}") from None
    finally:
        os.close(go_w)
        os.close(said_r)
        _reap(pid)


def _read_line(fd: int) -> str:
    """One line from the child, or what it said before it ended (MAKER_TIMEOUT_S at most)."""
    data = b""
    deadline = time.monotonic() + MAKER_TIMEOUT_S
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise SandboxError("what makes the user namespace did not answer")
        chunk = os.read(fd, 64)
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace")


def _reap(pid: int) -> None:
    """Wait for the child, killing it if it has not ended MAKER_TIMEOUT_S after being told."""
    deadline = time.monotonic() + MAKER_TIMEOUT_S
    try:
        while not os.waitpid(pid, os.WNOHANG)[0]:
            if time.monotonic() >= deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return
            time.sleep(0.0005)
    except ChildProcessError:
        pass  # reaped by a subreaper's sweep of this process's children
