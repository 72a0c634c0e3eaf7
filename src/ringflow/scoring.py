"""The isolated evaluator (SPEC 4, 8): validate, then score on hidden labels, outside the sandbox."""

from __future__ import annotations

import math
import subprocess
import time
from pathlib import Path

from . import statuses
from .disguise import disguised_inputs
from .errors import InputError
from .jsonio import atomic_write_json, read_json
from .layout import RingLayout, variant_seed
from .ring import deadline_for, load_ring
from .task import command_argv


def _run(argv: list[str], cwd: str, deadline: float, log) -> tuple[int | None, str]:
    """Run a scorer or validator; give up at the (moving) deadline. Returns (code, stderr)."""
    proc = subprocess.Popen(argv, cwd=cwd, stdout=log, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    while True:
        try:
            _, err = proc.communicate(timeout=0.25)
            return proc.returncode, err or ""
        except subprocess.TimeoutExpired:
            if time.time() >= deadline:
                proc.kill()
                proc.communicate()
                return None, "gave up: deadline reached"


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


def score_execution(ring_dir: str | Path, node: str, view: str, variant: str) -> dict:
    ring = load_ring(ring_dir)
    layout = RingLayout(Path(ring["ring_dir"]))
    exec_dir = layout.exec_dir(node, view, variant)
    result = read_json(layout.result(node, view, variant))
    out = layout.score(node, view, variant)
    seed = variant_seed(variant)
    record = {"node": node, "view": view, "variant": variant, "seed": seed, "scored": False}
    if result["status"] != statuses.OK:
        record.update(score=None, valid=False,
                      reason=f"not scored: execution {result['status']}")
        atomic_write_json(out, record)
        return record
    task_dir = ring["task"]["dir"]
    config_limit = ring["config"]["scorer_timeout_min"] * 60
    deadline = min(deadline_for(ring, view, variant)(), time.time() + config_limit)
    pred = exec_dir / "output"
    inputs = (disguised_inputs(ring, view) if variant == "blind-s0"
              else Path(ring["views"][view]["dir"]) / "inputs")
    started = time.time()
    with open(exec_dir / "scorer.log", "w") as log:
        if ring["task"]["validator"]:
            argv = command_argv(ring["task"]["validator"]) + ["--pred", str(pred),
                                                                "--inputs", str(inputs)]
            code, err = _run(argv, task_dir, deadline, log)
            if code is None:
                record.update(score=None, valid=False, budget_cut=True,
                              reason="validation cut by the deadline")
                atomic_write_json(out, record)
                return record
            if code != 0:
                why = err.strip().splitlines()[-1] if err.strip() else f"exit code {code}"
                # Invalid output scores zero and never reaches the hidden labels (SPEC 8).
                record.update(score=0.0, valid=False, scored=True,
                              reason=f"invalid output: {why}")
                atomic_write_json(out, record)
                return record
        raw_path = exec_dir / "score.raw.json"
        raw_path.unlink(missing_ok=True)
        labels = Path(ring["views"][view]["dir"]) / "labels"
        argv = command_argv(ring["task"]["scorer"]) + [
            "--pred", str(pred), "--labels", str(labels), "--seed", str(seed),
            "--out", str(raw_path)]
        code, err = _run(argv, task_dir, deadline, log)
        log.write(err)
    record["scoring_s"] = time.time() - started
    if code is None:
        record.update(score=None, valid=False, budget_cut=True, reason="scoring cut by the deadline")
    elif code != 0 or not raw_path.exists():
        why = err.strip().splitlines()[-1] if err.strip() else f"exit code {code}"
        record.update(score=None, valid=False, reason=f"scorer failed: {why}")
    else:
        try:
            record.update(_check_score(read_json(raw_path), raw_path), scored=True)
        except InputError as exc:
            record.update(score=None, valid=False, reason=f"scorer failed: {exc}")
    atomic_write_json(out, record)
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
