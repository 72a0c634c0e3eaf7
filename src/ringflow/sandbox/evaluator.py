"""The scorer's and validator's own sandbox (docs/contracts.md#the-evaluators-sandbox).

They see the system folders, ringflow's interpreter, the task folder without its views,
and at neutral paths the output to judge (read-only), the labels (scorer) or the inputs
(validator), and a folder for the scorer's record. As root they run as the sandbox uid;
otherwise in a user namespace. No network; memory, process and file-size limits.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ringflow.sandbox.commands import (
    INSIDE,
    base_argv,
    drop_privileges_argv,
    host_path_binds,
    namespace_argv,
    system_argv,
)
from ringflow.sandbox.interpreter import install_dirs

INSIDE_PRED = INSIDE / "pred"
INSIDE_LABELS = INSIDE / "labels"
INSIDE_INPUTS = INSIDE / "inputs"
INSIDE_RECORD = INSIDE / "record"
EVALUATOR_TMP_MB = 512


def ringflow_interpreter_dirs() -> list[str]:
    return install_dirs(
        {"executable": sys.executable, "prefix": sys.prefix, "base_prefix": sys.base_prefix}
    )


def evaluator_argv(
    info: dict,
    command: list[str],
    *,
    task_dir: Path,
    pred: Path,
    labels: Path | None = None,
    inputs: Path | None = None,
    record_dir: Path | None = None,
    limits: dict,
) -> list[str]:
    """argv that runs `command` (paths already pointing inside) in the evaluator's sandbox."""
    if info["mode"] == "none":
        return command
    root = info["mode"] == "root"
    argv = [info["bwrap_path"], *namespace_argv(userns=not root, network=False)]
    argv += system_argv() + base_argv(EVALUATOR_TMP_MB)
    argv += host_path_binds([Path(d) for d in ringflow_interpreter_dirs()] + [task_dir])
    views = task_dir / "views"
    if views.is_dir():
        argv += ["--tmpfs", str(views)]  # the scorer's files only, never other views
    argv += ["--ro-bind", str(pred), str(INSIDE_PRED)]
    if labels is not None:
        argv += ["--ro-bind", str(labels), str(INSIDE_LABELS)]
    if inputs is not None:
        argv += ["--ro-bind", str(inputs), str(INSIDE_INPUTS)]
    if record_dir is not None:
        argv += ["--bind", str(record_dir), str(INSIDE_RECORD)]
    argv += ["--chdir", str(task_dir), "--"]
    if root:
        argv += drop_privileges_argv(info["setpriv"], limits["uid"], limits["gid"])
    if info.get("prlimit"):
        memory = int(limits["memory_gb"] * 1024**3)
        argv += [
            info["prlimit"],
            f"--nproc={limits['max_processes']}",
            f"--data={memory}",
            f"--fsize={memory}",
            "--",
        ]
    return argv + command


def evaluator_env(threads: int) -> dict[str, str]:
    """An allow-listed environment: nothing of ringflow's own passes."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "HOME": "/tmp",
        "TMPDIR": "/tmp",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[name] = str(threads)
    return env
