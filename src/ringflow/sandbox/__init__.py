"""Confine a candidate program (SPEC 3 and 7.6).

The program always runs as an unprivileged uid without capabilities. With a
working bubblewrap it also gets a private mount view (working copy read-only
except progress.json and the weights folders it trains, labels and the store
hidden) and, when blind, no network. Without it, the execution's folders are
staged where that uid can reach them, and only network isolation is lost.

    plan = sandbox.plan(request, [python, "run.py", "--seed", "0"], base_env)
    ... run plan.argv with plan.env in plan.cwd (the supervisor) ...
    plan.finish()

`RINGFLOW_SANDBOX=user-only` forces the fallback; `RINGFLOW_SANDBOX=bwrap`
makes a missing or broken bubblewrap an error.
"""

from __future__ import annotations

import os

from ringflow.errors import SandboxError
from ringflow.sandbox.bwrap_mode import interpreter_binds, plan_bwrap
from ringflow.sandbox.layout import resolve_layout
from ringflow.sandbox.model import SandboxPlan, SandboxRequest
from ringflow.sandbox.probe import (
    MODE_VARIABLE,
    interpreter_problem,
    probe,
    requested_mode,
    resolve_program,
)
from ringflow.sandbox.user_only import plan_user_only

__all__ = [
    "MODE_VARIABLE",
    "SandboxError",
    "SandboxPlan",
    "SandboxRequest",
    "interpreter_problem",
    "plan",
    "probe",
    "probe_for",
]


def probe_for(settings: dict) -> dict:
    """What confinement this process gets under a ring's `sandbox` settings.

    The mode travels in RINGFLOW_SANDBOX; a ring that does not say `auto` sets it for
    this process.
    """
    if settings["mode"] != "auto":
        os.environ[MODE_VARIABLE] = settings["mode"]
    return probe(settings["uid"], settings["gid"])


def plan(
    request: SandboxRequest,
    program_argv: list[str],
    base_env: dict[str, str],
    weights_dir_rel: str | None = None,
) -> SandboxPlan:
    """Prepare one confined run of program_argv; the caller runs it and then calls finish().

    Writable paths are lent to the sandbox uid from now until finish().
    Raises SandboxError, before changing anything, when the request is
    malformed, ringflow is not root, the uid cannot run the interpreter
    (naming the folder in the way), RINGFLOW_SANDBOX=bwrap cannot be honoured,
    or (without bubblewrap) a hidden path is readable by the uid.
    """
    wanted = requested_mode()
    layout = resolve_layout(request, program_argv, weights_dir_rel)
    if os.geteuid() != 0:
        raise SandboxError(
            f"running the program as uid {request.uid} needs root; ringflow runs as uid "
            f"{os.geteuid()}"
        )
    info = probe(request.uid, request.gid)
    if info["setpriv"] is None:
        raise SandboxError("setpriv (util-linux) is needed to drop privileges and was not found")
    if wanted == "bwrap" and not info["bwrap"]:
        raise SandboxError(
            f"RINGFLOW_SANDBOX=bwrap but bubblewrap does not work: {info['bwrap_reason']}"
        )
    search_path = base_env.get("PATH", os.defpath)
    program = resolve_program(program_argv[0], search_path)
    problem = interpreter_problem(str(program), request.uid, request.gid)
    if info["bwrap"]:
        reach = interpreter_binds(program, request.uid, request.gid)
        if reach is None:
            raise SandboxError(problem or f"the sandbox cannot reach the interpreter {program}")
        return plan_bwrap(request, layout, program_argv, program, base_env, info, reach)
    if problem is not None:
        raise SandboxError(problem)
    return plan_user_only(request, layout, program_argv, base_env, info)
