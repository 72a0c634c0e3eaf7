"""Start the candidates' interpreter once in the sandbox, before a ring trusts either.

A ring whose sandbox cannot start anything, or whose program interpreter cannot run in
it, refuses to start with the reason (docs/contracts.md#sandbox): otherwise every execution would
fail and look like a bad candidate.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from ringflow.core.errors import SandboxError
from ringflow.core.settings import Sandbox
from ringflow.sandbox.box import plan_box
from ringflow.sandbox.layout import resolve_layout
from ringflow.sandbox.model import SandboxRequest

SELFTEST_TIMEOUT_S = 60


def selftest(info: dict, program: dict, settings: Sandbox, scratch_parent: Path) -> None:
    """Run `python -c 'import encodings'` as a program would; SandboxError if it fails."""
    if info["mode"] == "none":
        return
    scratch_parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".selftest-", dir=scratch_parent))
    try:
        for name in ("solution", "inputs", "output"):
            (scratch / name).mkdir(mode=0o755)
        scratch.chmod(0o755)
        request = SandboxRequest(
            solution_dir=scratch / "solution",
            input_dir=scratch / "inputs",
            output_dir=scratch / "output",
            progress_file=scratch / "solution" / "progress.json",
            environment_dirs=tuple(Path(d) for d in program["dirs"]),
            mounts=tuple(Path(m) for m in settings.mounts),
            uid=settings.uid,
            gid=settings.gid,
            host_uids=settings.host_uids,
        )
        argv = [program["executable"], "-c", "import encodings, sys; sys.exit(0)"]
        layout = resolve_layout(request, argv, None)
        plan = plan_box(request, layout, argv, {"PATH": "/usr/bin:/bin"}, info)
        try:
            if plan.spawn_setup is not None:
                plan.spawn_setup()
            done = subprocess.run(
                plan.argv, env=plan.env, cwd=plan.cwd, capture_output=True, text=True,
                timeout=SELFTEST_TIMEOUT_S, pass_fds=plan.pass_fds, check=False,
            )  # fmt: skip
            plan.confirm_started()
        finally:
            plan.finish()
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
            raise SandboxError(
                f"the program interpreter {program['path']} does not run in the sandbox "
                f"({info['mode']} mode): {last}"
            )
    except subprocess.TimeoutExpired:
        raise SandboxError(
            f"the program interpreter {program['path']} did not start in the sandbox "
            f"within {SELFTEST_TIMEOUT_S} s"
        ) from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
