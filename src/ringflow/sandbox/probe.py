"""Find out how this machine lets ringflow confine a program.

Nothing is assumed from the distribution: bubblewrap is tried for real, in the very form
the sandbox uses (as root: run by root, dropping to the sandbox uid inside; otherwise: in
a user namespace). Where it does not work, the reason says what to install or configure.

A probe that worked is remembered once per process and, where the caller names a folder,
once per boot of the host in that folder (docs/isolation.md#the-probe-cache): every
execution is a process of its own, and a bubblewrap start per execution was a tenth of
its cost. Anything that could change the answer is part of the cache's key.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

from ringflow.core.errors import SandboxError
from ringflow.core.jsonio import atomic_write_bytes
from ringflow.core.settings import Sandbox
from ringflow.sandbox import seccomp
from ringflow.sandbox.commands import drop_privileges_argv, namespace_argv, system_argv
from ringflow.sandbox.identity import (
    HOST_UIDS,
    SECCOMP,
    SHARED_UID,
    USER_NAMESPACE,
    new_user_namespace,
)

MODES = ("auto", "bwrap", "none")
PROBE_TIMEOUT_S = 20

# The kernel settings that allow or forbid user namespaces (userns_advice reads them too).
USERNS_SETTINGS = (
    "/proc/sys/user/max_user_namespaces",
    "/proc/sys/kernel/unprivileged_userns_clone",
    "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
)
BOOT_ID = "/proc/sys/kernel/random/boot_id"

_probes: dict[tuple, dict] = {}


def probe(uid: int = 65534, gid: int = 65534, cache_dir: Path | None = None) -> dict:
    """What confinement works here, cached per process (and in `cache_dir` when given).

    Keys: mode ("root", "userns" or None when bubblewrap cannot be used), reason (why
    not, with what to do; "works" otherwise), bwrap_path, setpriv, prlimit, root,
    kernel_state (what keeps a run's kernel state its own, sandbox/identity.py).
    """
    setpriv = shutil.which("setpriv")
    bwrap_path = shutil.which("bwrap")
    prlimit = shutil.which("prlimit")
    key = (uid, gid, os.geteuid(), setpriv, bwrap_path, prlimit)
    if key not in _probes:
        remembered = _cache_file(cache_dir, key) if cache_dir is not None else None
        found = _read_cached(remembered) if remembered is not None else None
        if found is None:
            found = _probe_uncached(uid, gid, setpriv, bwrap_path, prlimit)
            if remembered is not None and found["mode"] is not None:
                _write_cached(remembered, found)
        _probes[key] = found
    return dict(_probes[key])


def _stat(path: str | None) -> list | None:
    try:
        st = os.stat(path) if path else None
    except OSError:
        return None
    return None if st is None else [st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode]


def _read_text(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _cache_file(cache_dir: Path, key: tuple) -> Path | None:
    """Where a worked probe for `key` is remembered, or None where this host has no boot
    id to tie it to. The key holds the host and its boot, the tools as installed (their
    inodes and times) and the kernel's user-namespace settings: a reboot, a reinstalled
    bubblewrap or a changed sysctl probes again. Only working probes are remembered, so a
    machine that is fixed is seen at once."""
    boot = _read_text(BOOT_ID)
    if not boot:
        return None
    facts = {
        "key": list(key),
        "host": os.uname().nodename,
        "boot": boot,
        "kernel": os.uname().release,
        "tools": [_stat(path) for path in key[3:]],
        "userns": [_read_text(path) for path in USERNS_SETTINGS],
    }
    digest = hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:32]
    return Path(cache_dir) / f"sandbox-{digest}.json"


def _read_cached(path: Path) -> dict | None:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    # A damaged or foreign file is probed again, never trusted.
    if not isinstance(found, dict) or found.get("mode") not in ("root", "userns"):
        return None
    return found


def _write_cached(path: Path, found: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, json.dumps(found, sort_keys=True).encode(), durable=False)
    except OSError:
        pass  # a cache that cannot be written only costs the next job a probe


def _probe_uncached(
    uid: int, gid: int, setpriv: str | None, bwrap_path: str | None, prlimit: str | None
) -> dict:
    root = os.geteuid() == 0
    mode, reason = None, "works"
    if bwrap_path is None:
        reason = (
            "bubblewrap (bwrap) is not installed; install it (Debian/Ubuntu: "
            "apt-get install bubblewrap; Fedora/RHEL: dnf install bubblewrap)"
        )
    elif root and setpriv is None:
        reason = "setpriv is not installed; install util-linux (apt-get install util-linux)"
    kernel_state, kernel_state_why = USER_NAMESPACE, None
    if bwrap_path is not None and (setpriv is not None or not root):
        works, detail = False, "not tried"
        if root:
            works, detail = _try_own_namespace(bwrap_path, setpriv, uid, gid)
            if not works:
                # Without a namespace of its own, a run shares its uid's kernel state.
                kernel_state = SECCOMP if seccomp.supported() else SHARED_UID
                kernel_state_why = f"no user namespace of its own: {detail}"
        if not works:
            works, detail = _try_bwrap(bwrap_path, setpriv, uid, gid, root)
        if works:
            mode = "root" if root else "userns"
        else:
            reason = detail if root else f"{detail}; {userns_advice()}"
    return {
        "mode": mode,
        "reason": reason,
        "root": root,
        "bwrap_path": bwrap_path,
        "setpriv": setpriv,
        "prlimit": prlimit,
        "kernel_state": kernel_state,
        "kernel_state_why": kernel_state_why,
    }


def _try_own_namespace(bwrap: str, setpriv: str | None, uid: int, gid: int) -> tuple[bool, str]:
    """Root: whether a run can have a user namespace of its own (sandbox/identity.py)."""
    try:
        fd = new_user_namespace(uid, gid, HOST_UIDS["first"])
    except SandboxError as exc:
        return False, str(exc)
    try:
        return _try_bwrap(bwrap, setpriv, uid, gid, True, userns_fd=fd)
    finally:
        os.close(fd)


def _try_bwrap(
    bwrap: str, setpriv: str | None, uid: int, gid: int, root: bool, userns_fd: int | None = None
) -> tuple[bool, str]:
    # The very form the plans use, so that a probe that passes means runs that start.
    command = [bwrap, *namespace_argv(userns=not root, network=False, userns_fd=userns_fd)]
    command += system_argv()
    command += ["--proc", "/proc", "--dev", "/dev", "--"]
    if root:
        command += drop_privileges_argv(setpriv, uid, gid)  # type: ignore[arg-type]
    command.append("true")
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False,
            pass_fds=() if userns_fd is None else (userns_fd,),
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"bubblewrap failed to run: {exc}"
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        return False, f"bubblewrap does not work here ({detail[-1] if detail else done.returncode})"
    return True, "works"


def _read_int(path: str) -> int | None:
    try:
        return int(Path(path).read_text().strip())
    except (OSError, ValueError):
        return None


def userns_advice() -> str:
    """What keeps unprivileged user namespaces off on this machine, and how to turn them on."""
    if _read_int("/proc/sys/user/max_user_namespaces") == 0:
        return (
            "user namespaces are disabled (user.max_user_namespaces = 0): ask the "
            "administrator for `sysctl -w user.max_user_namespaces=15000`"
        )
    if _read_int("/proc/sys/kernel/unprivileged_userns_clone") == 0:
        return (
            "unprivileged user namespaces are disabled: ask the administrator for "
            "`sysctl -w kernel.unprivileged_userns_clone=1`"
        )
    if _read_int("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == 1:
        return (
            "AppArmor restricts unprivileged user namespaces (Ubuntu 23.10+): ask the "
            "administrator for an AppArmor profile that allows `userns` for "
            "/usr/bin/bwrap, or `sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`"
        )
    return (
        "unprivileged user namespaces may be unavailable here; run as root, or ask the "
        "administrator to enable them"
    )


def require_sandbox(settings: Sandbox, cache_dir: Path | None = None) -> dict:
    """The sandbox a ring will use under its `sandbox` settings, or SandboxError.

    `mode: none` (trusted programs only) must be asked for by name; `auto` and `bwrap`
    both require a working bubblewrap and refuse, with what to do, where there is none.
    The jobs of a locked ring pass its probe folder (`cache_dir`); the lock itself and
    `ringflow check` always probe.
    """
    wanted = settings.mode
    if wanted not in MODES:
        raise SandboxError(f"sandbox.mode {wanted!r} is not one of {', '.join(MODES)}")
    if wanted == "none":
        return {"mode": "none", "reason": "sandbox.mode: none (trusted programs only)"}
    info = probe(settings.uid, settings.gid, cache_dir)
    if info["mode"] is None:
        raise SandboxError(
            f"no sandbox can be had on this machine: {info['reason']}. Programs are never "
            "run unconfined unless the configuration says sandbox.mode: none (trusted "
            "programs only)"
        )
    return info


def resolve_program(argv0: str, search_path: str | None) -> Path:
    """argv[0] as an absolute path, looked up on PATH when it has no slash."""
    if "/" in argv0:
        return Path(os.path.abspath(argv0))
    found = shutil.which(argv0, path=search_path or os.defpath)
    if found is None:
        raise SandboxError(f"program {argv0!r} not found on PATH {search_path or os.defpath!r}")
    return Path(os.path.abspath(found))
