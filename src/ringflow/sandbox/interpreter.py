"""The interpreter a sandboxed process runs with, and the folders its install needs.

Candidate programs run with `program.python` (their own environment, docs/contracts.md#candidate);
the task's scorer and validator with ringflow's interpreter. Either install may live in a
private home folder: the sandbox binds it read-only at its host path, so what it needs
is asked of the interpreter itself (its real executable, prefix and base prefix) once,
when the ring is locked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ringflow.core.errors import SandboxError

DESCRIBE = (
    "import json, sys, sysconfig; print(json.dumps({'executable': sys.executable, "
    "'prefix': sys.prefix, 'base_prefix': sys.base_prefix, "
    "'version': sys.version.split()[0], 'platlib': sysconfig.get_paths()['platlib']}))"
)


def describe_interpreter(python: str | os.PathLike) -> dict:
    """{executable, prefix, base_prefix, version, platlib, dirs} of a Python interpreter.

    `dirs` are the host folders the sandbox binds for it. Raises SandboxError, naming
    the interpreter, when it does not exist or does not run.
    """
    python = str(python)
    if python == sys.executable:
        info = {
            "executable": sys.executable,
            "prefix": sys.prefix,
            "base_prefix": sys.base_prefix,
            "version": sys.version.split()[0],
        }
    else:
        if not Path(python).exists():
            raise SandboxError(f"the program interpreter {python} does not exist")
        try:
            done = subprocess.run(
                [python, "-c", DESCRIBE], capture_output=True, text=True, timeout=60, check=False
            )
        except OSError as exc:
            raise SandboxError(f"the program interpreter {python} cannot run: {exc}") from None
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
            raise SandboxError(f"the program interpreter {python} does not run: {last}")
        info = json.loads(done.stdout)
        info.pop("platlib", None)
    info["path"] = python
    info["dirs"] = install_dirs(info)
    return info


def install_dirs(info: dict) -> list[str]:
    """The environment's prefix and the base install it was made from (realpaths too)."""
    dirs: list[str] = []
    for key in ("prefix", "base_prefix"):
        for path in {info[key], os.path.realpath(info[key])}:
            if path not in dirs:
                dirs.append(path)
    executable = os.path.realpath(info["executable"])
    exec_root = str(Path(executable).parent.parent)
    if not any(Path(executable).is_relative_to(d) for d in dirs):
        dirs.append(exec_root)
    return sorted(dirs)
