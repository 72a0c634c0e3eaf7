"""What one short SLURM job finds on a compute node before a ring's executions go there
(docs/slurm.md#compute-nodes-are-probed). Runs on the node as
`python -m ringflow.cluster.node_check REQUEST`, REQUEST being the JSON `node_probe`
writes; prints one line, `ringflow-node-probe: {facts}`.

The driver's machine says nothing about the nodes: each may lack bubblewrap or user
namespaces, the candidates' interpreter, the shared filesystem the ring folder and the
store live on, or the GPUs the profile asks for. Found here, each is one line at the lock
instead of every execution failing as if its candidate were bad.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

MARK = "ringflow-node-probe: "
# The file the driver writes in each folder, holding a token only it knows: a node that
# reads it sees the driver's folder, not a local one of the same name.
TOKEN_FILE = ".ringflow-node-probe"
PYTHON_TIMEOUT_S = 60


def folder_fact(path: Path, token: str) -> dict:
    """The folder exists here, is the driver's (its token), and takes a new file."""
    if not path.is_dir():
        return {"ok": False, "reason": f"{path} does not exist on this node"}
    try:
        seen = (path / TOKEN_FILE).read_text().strip()
    except OSError:
        seen = None
    if seen != token:
        return {
            "ok": False,
            "reason": f"{path} on this node is not the driver's folder (the driver's token "
            "is not in it): put it on a filesystem the nodes share",
        }
    try:
        fd, name = tempfile.mkstemp(dir=path, prefix=".node-probe-")
        os.close(fd)
        os.unlink(name)
    except OSError as exc:
        return {"ok": False, "reason": f"{path} takes no new file on this node: {exc.strerror}"}
    return {"ok": True}


def sandbox_fact(settings: dict) -> dict:
    from ..core.errors import SandboxError
    from ..core.settings import Sandbox
    from ..sandbox.probe import require_sandbox

    try:
        info = require_sandbox(Sandbox.from_mapping(settings, "sandbox"))
    except SandboxError as exc:
        return {"ok": False, "reason": str(exc)}
    return {"ok": True, "mode": info.get("mode")}


def python_fact(python: str) -> dict:
    """The candidates' interpreter starts here."""
    try:
        done = subprocess.run(
            [python, "-c", "import sys; print(sys.version.split()[0])"],
            capture_output=True, text=True, timeout=PYTHON_TIMEOUT_S, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"ok": False, "reason": f"{python} does not run on this node: {exc}"}
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        return {"ok": False, "reason": f"{python} does not run on this node: {why}"}
    return {"ok": True, "version": done.stdout.strip()}


def gpu_fact() -> dict:
    """The GPUs SLURM gave the probe job, their model and driver (NVML on the node)."""
    from ..sandbox.gpus import gpu_facts

    facts = gpu_facts()
    return {"ok": bool(facts["gpus"]), **facts}


def node_facts(request: dict) -> dict:
    facts = {
        "host": os.uname().nodename,
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "sandbox": sandbox_fact(request["sandbox"]),
        "program_python": python_fact(request["program_python"]),
        "folders": {
            name: folder_fact(Path(path), request["token"])
            for name, path in request["folders"].items()
        },
    }
    if request.get("gpus"):
        facts["gpu"] = gpu_fact()
    return facts


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    request = json.loads(args[0])
    print(MARK + json.dumps(node_facts(request), sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
