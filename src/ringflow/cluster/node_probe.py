"""One short SLURM job on the ring's partition, at the lock and in `ringflow check
--profile`, that looks at a compute node as the executions will find it
(docs/slurm.md#compute-nodes-are-probed): the sandbox, the candidates' interpreter, the
ring folder and the store on the filesystem the driver shares with the nodes, and, where
the executions ask for GPUs, the node's GPU model and driver. `node_check` does the
looking on the node; this module asks SLURM for the job and reads its answer.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

from ..core.errors import InputError
from .node_check import MARK, TOKEN_FILE
from .slurm import job_prefix
from .target import SlurmTarget

# Submission, waiting for a free slot, and a sandbox and interpreter start on the node.
PROBE_TIMEOUT_S = 300
PROBE_TIME_MIN = 5


def probe_argv(
    request: dict, target: SlurmTarget, gpus: int, job_name: str, python: str | None = None
) -> list[str]:
    """The `srun` command line of the probe job: one task, one CPU, 1 GB, 5 minutes, and
    the GPUs one execution asks for (of the profile's model)."""
    argv = [
        "srun", "--nodes=1", "--ntasks=1", "--cpus-per-task=1", "--mem=1G",
        f"--time={PROBE_TIME_MIN}", f"--job-name={job_name}", "--quiet",
    ]  # fmt: skip
    if target.partition:
        argv.append(f"--partition={target.partition}")
    if gpus:
        argv.append(f"--gpus={target.gpu_model}:{gpus}" if target.gpu_model else f"--gpus={gpus}")
    return [*argv, python or sys.executable, "-m", "ringflow.cluster.node_check",
            json.dumps(request, sort_keys=True)]  # fmt: skip


def parse_answer(stdout: str) -> dict | None:
    """The probe's facts from the job's output (srun may add lines of its own)."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARK):
            try:
                facts = json.loads(line[len(MARK) :])
            except ValueError:
                return None
            return facts if isinstance(facts, dict) else None
    return None


def node_problems(facts: dict) -> list[str]:
    """Why the executions cannot run on the probed node, one line each; [] when they can."""
    host = facts.get("host", "the node")
    problems = []
    for name in ("sandbox", "program_python"):
        fact = facts.get(name) or {}
        if not fact.get("ok"):
            problems.append(f"{name.replace('_', '.')} on {host}: {fact.get('reason')}")
    for name, fact in sorted((facts.get("folders") or {}).items()):
        if not fact.get("ok"):
            problems.append(f"the {name} on {host}: {fact.get('reason')}")
    gpu = facts.get("gpu")
    if gpu is not None and not gpu.get("ok"):
        problems.append(
            f"GPUs on {host}: SLURM gave the probe job none that NVML sees "
            f"({gpu.get('reason') or 'no GPU'})"
        )
    return problems


def probe_node(
    ring_id: str,
    folders: dict[str, Path],
    program_python: Path,
    sandbox: dict,
    target: SlurmTarget,
    gpus: int = 0,
    timeout_s: float = PROBE_TIMEOUT_S,
) -> dict:
    """Run the probe job and return the node's facts; InputError with every problem found
    (or with why the job gave no answer)."""
    if shutil.which("srun") is None:
        raise InputError("the ring runs under SLURM but `srun` is not on PATH here")
    token = secrets.token_hex(16)
    request = {
        "token": token,
        "folders": {name: str(path) for name, path in folders.items()},
        "program_python": str(program_python),
        "sandbox": sandbox,
        "gpus": gpus,
    }
    job_name = f"{job_prefix(ring_id)}_node-probe"
    argv = probe_argv(request, target, gpus, job_name)
    with ExitStack() as cleanup:
        for path in folders.values():
            marker = Path(path) / TOKEN_FILE
            marker.write_text(token + "\n")
            cleanup.callback(marker.unlink, missing_ok=True)
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            with _signals_cancel_the_job(proc) as stopped:
                stdout, stderr = proc.communicate(timeout=timeout_s)
            if stopped:
                raise SystemExit(f"the probe job was cancelled: this step received {stopped[0]}")
        except subprocess.TimeoutExpired:
            _cancel(proc)
            raise InputError(
                f"the probe job on SLURM partition {target.partition or '(the default)'} gave "
                f"no answer in {timeout_s:.0f} s (it pended or hung; it was cancelled)"
            ) from None
    facts = parse_answer(stdout)
    if facts is None:
        said = (stderr or stdout).strip().splitlines()
        raise InputError(
            f"the probe job on SLURM partition {target.partition or '(the default)'} gave no "
            f"answer (exit code {proc.returncode}): {said[-1] if said else 'no output'}"
        )
    if problems := node_problems(facts):
        raise InputError("a compute node cannot run the ring's executions: " + "; ".join(problems))
    return facts


def _cancel(proc: subprocess.Popen) -> None:
    """End srun with SIGTERM, which makes it cancel its job, pending or running (SIGKILL
    would leave the job behind)."""
    proc.terminate()
    try:
        proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()


@contextlib.contextmanager
def _signals_cancel_the_job(proc: subprocess.Popen) -> Iterator[list[str]]:
    """While srun waits: SIGTERM, SIGINT or SIGHUP to this process (the driver stopping
    the lock) cancels the probe job first; the list names the signal that came.

    The job is not the plugin's, so the driver's own stop does not know its id; and this
    process's default end on SIGTERM would leave srun, and its job, running."""
    stopped: list[str] = []
    if threading.current_thread() is not threading.main_thread():
        yield stopped
        return

    def stop(signum: int, _frame) -> None:
        if not stopped:
            stopped.append(signal.Signals(signum).name)
            proc.terminate()

    wanted = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    before = {sig: signal.signal(sig, stop) for sig in wanted}
    try:
        yield stopped
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
