"""Confine a candidate program (docs/contracts.md#sandbox).

Programs run in bubblewrap: as root, dropped to an unprivileged uid without
capabilities; as an ordinary user, in a user namespace. A program sees the system
folders, its interpreter's environment and declared mounts (read-only, at their host
paths), and its own working copy, inputs, output, progress file and, when training,
weights folder under /ringflow; a fresh size-limited /tmp; no network unless asked.
Where no sandbox can be had the ring refuses to start, unless `sandbox.mode: none`
(trusted programs only) is named.

    plan = sandbox.plan(request, [python, "run.py", "--seed", "0"], base_env, info)
    ... call plan.spawn_setup() in the starting thread, then run plan.argv with plan.env
        in plan.cwd (the supervisor) ...
    plan.confirm_started(); plan.finish()
"""

from __future__ import annotations

from ringflow.core.errors import SandboxError
from ringflow.sandbox.box import plan_box
from ringflow.sandbox.layout import resolve_layout
from ringflow.sandbox.model import SandboxPlan, SandboxRequest
from ringflow.sandbox.probe import MODES, probe, require_sandbox, userns_advice
from ringflow.sandbox.program_env import program_env

__all__ = [
    "MODES",
    "SandboxError",
    "SandboxPlan",
    "SandboxRequest",
    "plan",
    "probe",
    "require_sandbox",
    "userns_advice",
]


def plan(
    request: SandboxRequest,
    program_argv: list[str],
    base_env: dict[str, str],
    info: dict,
    weights_dir_rel: str | None = None,
) -> SandboxPlan:
    """Prepare one confined run of program_argv; the caller runs it and then calls finish().

    `info` is what `require_sandbox` returned for the ring. Raises SandboxError, before
    changing anything, when the request is malformed.
    """
    layout = resolve_layout(request, program_argv, weights_dir_rel)
    if info["mode"] == "none":
        return _unconfined(request, layout, program_argv, base_env)
    return plan_box(request, layout, program_argv, base_env, info)


def _unconfined(request, layout, program_argv, base_env) -> SandboxPlan:
    """sandbox.mode: none: the program runs as ringflow's user, in its working copy."""
    weights = layout.writable_rels[0] if layout.writable_rels else layout.weights_rel
    env = program_env(
        base_env,
        inputs=layout.inputs,
        output=layout.output,
        progress=layout.progress,
        weights=None if weights is None else layout.solution / weights,
        home=layout.output.parent,
    )
    return SandboxPlan(
        mode="none",
        argv=list(program_argv),
        env=env,
        cwd=str(layout.solution),
        network_isolated=False,
        notes=["sandbox.mode: none: the program ran unconfined (trusted programs only)"],
    )
