"""The isolated evaluator (SPEC 4, 8): validate, then score on hidden labels.

It runs outside the sandbox, after the program's whole tree is gone, so the program never
holds the labels; its waits give up at the execution's (moving) deadline.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import stat
import subprocess
import time
from pathlib import Path

from . import sandbox, statuses
from .errors import InputError
from .jsonio import atomic_write_json, read_json
from .ring.clock import load_ring, scoring_deadline_for
from .ring.inputs import program_inputs
from .ring.layout import RingLayout, variant_seed
from .ring.stop import stop_ring
from .sandbox.evaluator import (
    INSIDE_INPUTS,
    INSIDE_LABELS,
    INSIDE_PRED,
    INSIDE_RECORD,
    evaluator_argv,
    evaluator_env,
)
from .sandbox.output_check import refuse_pointers
from .sandbox.ownership import OwnershipLoan
from .task import command_argv
from .workcopy import reset_dir


def _run(argv: list[str], env: dict, deadline, limit_s: float, log) -> tuple[str, str]:
    """Run a scorer or validator in its sandbox: ("done" | "cut" | "timeout", stderr).

    The deadline is re-read at every poll, so a cutoff moved earlier reaches a scorer
    that is already running ("cut", a budget cut); its own time limit is "timeout", a
    failure of the scorer, never a budget cut.
    """
    proc = subprocess.Popen(
        argv, cwd="/", env=env, stdout=log, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    give_up = time.time() + limit_s
    while True:
        try:
            _, err = proc.communicate(timeout=0.25)
            return ("done" if proc.returncode == 0 else f"exit {proc.returncode}"), err or ""
        except subprocess.TimeoutExpired:
            now = time.time()
            if now >= deadline() or now >= give_up:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.kill()
                proc.communicate()
                return ("cut" if now >= deadline() else "timeout"), ""


def _last_line(err: str, code: int | None) -> str:
    lines = err.strip().splitlines()
    return lines[-1] if lines else f"exit code {code}"


def _check_score(raw: object, path: Path) -> dict:
    if not isinstance(raw, dict):
        raise InputError(f"{path}: scorer output must be a JSON object")
    score, valid, reason = raw.get("score"), raw.get("valid"), raw.get("reason", "")
    if not isinstance(valid, bool):
        raise InputError(f"{path}: 'valid' must be true or false")
    if not isinstance(score, (int, float)) or isinstance(score, bool) or not math.isfinite(score):
        raise InputError(f"{path}: 'score' must be a finite number")
    if not isinstance(reason, str):
        raise InputError(f"{path}: 'reason' must be a string")
    return {"score": float(score), "valid": valid, "reason": reason}


def _evaluate(ring: dict, exec_dir: Path, view: str, variant: str, seed: int) -> dict:
    """Validator first (invalid output never reaches the labels), then the scorer.

    The output must be plain data first: links, FIFOs and devices make it invalid
    before any evaluator reads it.
    """
    task = ring["task"]
    config = ring["config"]
    limit_s = config["scorer_timeout_min"] * 60
    deadline = scoring_deadline_for(ring, view, variant)
    pred = exec_dir / "output"
    refused = refuse_pointers(pred)
    if refused is not None:
        return {"valid": False, "reason": f"invalid: {refused}"}
    view_dir = Path(ring["views"][view]["dir"])
    inputs = program_inputs(ring, view, variant)
    info = evaluator_sandbox(ring)
    limits = {**config["evaluator"], "uid": config["sandbox"]["uid"],
              "gid": config["sandbox"]["gid"]}  # fmt: skip
    env = evaluator_env(config["limits"]["threads"])
    task_dir = Path(task["dir"])
    with open(exec_dir / "scorer.log", "w") as log:
        if task["validator"]:
            command = [*command_argv(task["validator"]), "--pred", str(INSIDE_PRED),
                       "--inputs", str(INSIDE_INPUTS)]  # fmt: skip
            argv = evaluator_argv(info, command, task_dir=task_dir, pred=pred, inputs=inputs,
                                  limits=limits)  # fmt: skip
            ended, err = _run(argv, env, deadline, limit_s, log)
            if ended == "cut":
                return {"budget_cut": True, "reason": "validation cut by the deadline"}
            if ended == "timeout":
                return _evaluator_failed("validator", f"no verdict within {limit_s:.0f} s")
            if ended != "done":
                # Invalid output has no score, with the validator's reason (SPEC 8).
                return {"valid": False, "reason": f"invalid: {_last_line(err, ended)}"}
        record_dir = reset_dir(exec_dir / "scoring")
        loan = _lend(info, record_dir, limits)
        raw_path = record_dir / "score.json"
        command = [
            *command_argv(task["scorer"]),
            *("--pred", str(INSIDE_PRED), "--labels", str(INSIDE_LABELS)),
            *("--seed", str(seed), "--out", str(INSIDE_RECORD / "score.json")),
        ]
        argv = evaluator_argv(info, command, task_dir=task_dir, pred=pred,
                              labels=view_dir / "labels", record_dir=record_dir,
                              limits=limits)  # fmt: skip
        try:
            ended, err = _run(argv, env, deadline, limit_s, log)
        finally:
            if loan is not None:
                loan.take_back()
        log.write(err)
    if ended == "cut":
        return {"budget_cut": True, "reason": "scoring cut by the deadline"}
    if ended == "timeout":
        return _evaluator_failed("scorer", f"no score within {limit_s:.0f} s")
    if ended != "done" or not _regular_file(raw_path):
        return _evaluator_failed("scorer", _last_line(err, ended))
    try:
        return {**_check_score(read_json(raw_path), raw_path), "scored": True}
    except InputError as exc:
        return _evaluator_failed("scorer", str(exc))


def _evaluator_failed(which: str, why: str) -> dict:
    """The task's own evaluator failed on this output: invalid here, counted by the ring."""
    return {"valid": False, "evaluator_failed": which, "reason": f"{which} failed: {why}"}


def _regular_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _lend(info: dict, folder: Path, limits: dict):
    """As root the evaluator runs as the sandbox uid: its record folder is lent to it."""
    if info["mode"] != "root":
        return None
    loan = OwnershipLoan(limits["uid"], limits["gid"])
    loan.lend(folder)
    return loan


def evaluator_sandbox(ring: dict) -> dict:
    """The sandbox the ring was locked with (probed again in this job, cached per process)."""
    if ring["config"]["sandbox"]["mode"] == "none":
        return {"mode": "none"}
    return sandbox.require_sandbox(ring["config"]["sandbox"])


def _count_evaluator_failure(ring: dict, layout: RingLayout, node: str, record: dict) -> None:
    """A failing scorer on the baseline, or on scorer_fail_stop nodes, stops the ring."""
    index = read_json(layout.nodes_index) if layout.nodes_index.exists() else {}
    which = record["evaluator_failed"]
    if node == index.get("baseline"):
        raise stop_ring(layout.root, f"the task's {which} failed on the baseline's output "
                        f"({record['reason']})", node=node)  # fmt: skip
    folder = layout.root / "evaluator_failures"
    folder.mkdir(exist_ok=True)
    (folder / node).touch()
    failed = sorted(p.name for p in folder.iterdir())
    limit = ring["config"]["scorer_fail_stop"]
    if len(failed) >= limit:
        raise stop_ring(layout.root, f"the task's {which} failed on {len(failed)} distinct "
                        f"nodes ({', '.join(failed)}); last: {record['reason']}",
                        nodes=failed)  # fmt: skip


def score_execution(ring_dir: str | Path, node: str, view: str, variant: str) -> dict:
    ring = load_ring(ring_dir)
    layout = RingLayout(Path(ring["ring_dir"]))
    result = read_json(layout.result(node, view, variant))
    seed = variant_seed(variant)
    record = {
        "node": node,
        "view": view,
        "variant": variant,
        "seed": seed,
        "scored": False,
        "score": None,
        "valid": False,
    }
    if result["status"] != statuses.OK:
        record["reason"] = f"not scored: execution {result['status']}"
    else:
        started = time.time()
        record.update(_evaluate(ring, layout.exec_dir(node, view, variant), view, variant, seed))
        record["scoring_s"] = time.time() - started
    atomic_write_json(layout.score(node, view, variant), record)
    if record.get("evaluator_failed"):
        _count_evaluator_failure(ring, layout, node, record)
    return record


def read_score(layout: RingLayout, node: str, view: str, variant: str) -> dict | None:
    path = layout.score(node, view, variant)
    return read_json(path) if path.exists() else None


def usable(score: dict | None, direction: str) -> float | None:
    """The number a ranking uses, or None when the execution has no usable score.

    Invalid output scores zero (SPEC 8); under `minimize` zero would be the best possible
    score, so there invalid output counts as a failure instead.
    """
    if score is None or not score.get("scored"):
        return None
    if not score["valid"] and direction == "minimize":
        return None
    return score["score"]


def evaluate_predictions(ring: dict, folder: Path, view: str, seed: int) -> dict:
    """Validate and score the predictions in folder/output on one view (a score query);
    the same evaluator as an execution's, writing its logs into folder."""
    return _evaluate(ring, folder, view, "s0", seed)
