"""Find out, once per process, how this machine lets ringflow confine a program.

Nothing is assumed from the distribution: bubblewrap is tried for real, in
the very form the sandbox uses (run by root, dropping to the sandbox uid
inside, with its own network namespace).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from ringflow.errors import SandboxError
from ringflow.sandbox.as_user import attempt_as_user, describe_owner, first_untraversable
from ringflow.sandbox.commands import bwrap_root_argv, drop_privileges_argv

MODE_VARIABLE = "RINGFLOW_SANDBOX"
MODES = ("bwrap", "user-only")
PROBE_TIMEOUT_S = 20

_probes: dict[tuple, dict] = {}
_interpreters: dict[tuple[str, int, int], str | None] = {}


def requested_mode() -> str:
    """The mode that RINGFLOW_SANDBOX asks for ("" when unset: the best available)."""
    wanted = os.environ.get(MODE_VARIABLE, "").strip()
    if wanted and wanted not in MODES:
        raise SandboxError(f"{MODE_VARIABLE}={wanted!r} is not one of {', '.join(MODES)}")
    return wanted


def probe(uid: int = 65534, gid: int = 65534) -> dict:
    """What confinement works here, cached per process (per RINGFLOW_SANDBOX and tools found).

    Keys: bwrap (bool), bwrap_reason (why not, or "works"), bwrap_path,
    setpriv (path or None), net_isolation (bool), root (bool), requested
    (RINGFLOW_SANDBOX or "auto"), python (sys.executable) and python_problem
    (why uid cannot run it, or None).
    """
    wanted = os.environ.get(MODE_VARIABLE, "").strip()
    setpriv = shutil.which("setpriv")
    bwrap_path = shutil.which("bwrap")
    key = (uid, gid, wanted, setpriv, bwrap_path)
    if key not in _probes:
        _probes[key] = _probe_uncached(uid, gid, wanted, setpriv, bwrap_path)
    return dict(_probes[key])


def _probe_uncached(
    uid: int, gid: int, wanted: str, setpriv: str | None, bwrap_path: str | None
) -> dict:
    root = os.geteuid() == 0
    if wanted == "user-only":
        works, reason = False, f"{MODE_VARIABLE}=user-only"
    elif not root:
        works, reason = False, f"ringflow runs as uid {os.geteuid()}, not root"
    elif setpriv is None:
        works, reason = False, "setpriv (util-linux) not found"
    elif bwrap_path is None:
        works, reason = False, "bwrap not found on PATH"
    else:
        works, reason = _try_bwrap(bwrap_path, setpriv, uid, gid)
    python_problem = interpreter_problem(sys.executable, uid, gid) if root else None
    return {
        "requested": wanted or "auto",
        "root": root,
        "setpriv": setpriv,
        "bwrap": works,
        "bwrap_path": bwrap_path,
        "bwrap_reason": reason,
        "net_isolation": works,
        "python": sys.executable,
        "python_problem": python_problem,
    }


def _try_bwrap(bwrap: str, setpriv: str, uid: int, gid: int) -> tuple[bool, str]:
    # The very form the plans use, so that a probe that passes means runs that start.
    command = [
        bwrap,
        *bwrap_root_argv(),
        "--unshare-net",
        "--unshare-pid",
        "--die-with-parent",
        "--",
        *drop_privileges_argv(setpriv, uid, gid),
        "true",
    ]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"{' '.join(command[:1])} failed to run: {exc}"
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        return False, f"bwrap probe exited {done.returncode}: {detail[-1] if detail else ''}"
    return True, "works"


def resolve_program(argv0: str, search_path: str | None) -> Path:
    """argv[0] as an absolute path, looked up on PATH when it has no slash."""
    if "/" in argv0:
        return Path(os.path.abspath(argv0))
    found = shutil.which(argv0, path=search_path or os.defpath)
    if found is None:
        raise SandboxError(f"program {argv0!r} not found on PATH {search_path or os.defpath!r}")
    return Path(os.path.abspath(found))


def interpreter_problem(
    argv0: str, uid: int, gid: int, search_path: str | None = None
) -> str | None:
    """Why uid/gid cannot run argv0 (naming the folder it cannot traverse), or None.

    A virtual environment counts as its whole install: the folder named by
    `home` in its pyvenv.cfg and its lib/ folder must be reachable too.
    """
    program = resolve_program(argv0, search_path)
    key = (str(program), uid, gid)
    if key not in _interpreters:
        _interpreters[key] = _interpreter_problem_uncached(program, uid, gid)
    return _interpreters[key]


def interpreter_paths(program: Path) -> list[Path]:
    """The program, and for a virtual environment its lib/ and the `home` of pyvenv.cfg."""
    paths = [program]
    config = program.parent.parent / "pyvenv.cfg"
    if config.is_file():
        paths.append(program.parent.parent / "lib")
        for line in config.read_text(errors="replace").splitlines():
            name, _, value = line.partition("=")
            if name.strip() == "home" and value.strip():
                paths.append(Path(value.strip()))
    return paths


def _interpreter_problem_uncached(program: Path, uid: int, gid: int) -> str | None:
    who = f"uid {uid}"
    blocked = first_untraversable(uid, gid, program)
    if blocked is not None:
        return (
            f"the sandbox user ({who}) cannot run {program}: folder {blocked} is not "
            f"traversable ({describe_owner(blocked)}); use an interpreter installed where "
            f"{who} can read it, or give the folder o+x"
        )
    if attempt_as_user(uid, gid, [("exec", str(program))])[0] is not None:
        return f"the sandbox user ({who}) cannot execute {program} ({describe_owner(program)})"
    venv = program.parent.parent
    for folder in interpreter_paths(program)[1:]:
        blocked = first_untraversable(uid, gid, folder, include_self=True)
        if blocked is None and attempt_as_user(uid, gid, [("list", str(folder))])[0] is not None:
            blocked = folder
        if blocked is not None:
            return (
                f"the sandbox user ({who}) cannot use the environment {venv} of {program}: "
                f"folder {blocked} is not readable ({describe_owner(blocked)})"
            )
    return None
