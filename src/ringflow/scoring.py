"""The isolated evaluator (SPEC 4, 8): validate, then score on hidden labels.

It runs outside the sandbox, after the program's whole tree is gone, so the program never
holds the labels; its waits give up at the execution's (moving) deadline.
"""

from __future__ import annotations

import math
import subprocess
import time
from pathlib import Path

from . import statuses
from .errors import InputError
from .jsonio import atomic_write_json, read_json
from .ring.clock import load_ring, scoring_deadline_for
from .ring.layout import RingLayout, variant_seed
from .task import command_argv


def _run(argv: list[str], cwd: str, deadline: float, log) -> tuple[int | None, str]:
    """Run a scorer or validator; None as exit code when the deadline came first."""
    proc = subprocess.Popen(
        argv, cwd=cwd, stdout=log, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    while True:
        try:
            _, err = proc.communicate(timeout=0.25)
            return proc.returncode, err or ""
        except subprocess.TimeoutExpired:
            if time.time() >= deadline:
                proc.kill()
                proc.communicate()
                return None, "gave up: deadline reached"


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
    """Validator first (invalid output never reaches the labels), then the scorer."""
    task = ring["task"]
    limit_s = ring["config"]["scorer_timeout_min"] * 60
    deadline = min(scoring_deadline_for(ring, view, variant)(), time.time() + limit_s)
    pred = exec_dir / "output"
    view_dir = Path(ring["views"][view]["dir"])
    if variant == "blind-s0":
        from .selection.disguise import disguised_inputs

        inputs = disguised_inputs(ring, view)
    else:
        inputs = view_dir / "inputs"
    with open(exec_dir / "scorer.log", "w") as log:
        if task["validator"]:
            argv = [*command_argv(task["validator"]), "--pred", str(pred), "--inputs", str(inputs)]
            code, err = _run(argv, task["dir"], deadline, log)
            if code is None:
                return {"budget_cut": True, "reason": "validation cut by the deadline"}
            if code != 0:
                # Invalid output scores zero with its reason (SPEC 8).
                why = _last_line(err, code)
                return {"score": 0.0, "valid": False, "scored": True, "reason": f"invalid: {why}"}
        raw_path = exec_dir / "score.raw.json"
        raw_path.unlink(missing_ok=True)
        argv = [
            *command_argv(task["scorer"]),
            *("--pred", str(pred), "--labels", str(view_dir / "labels")),
            *("--seed", str(seed), "--out", str(raw_path)),
        ]
        code, err = _run(argv, task["dir"], deadline, log)
        log.write(err)
    if code is None:
        return {"budget_cut": True, "reason": "scoring cut by the deadline"}
    if code != 0 or not raw_path.exists():
        return {"reason": f"scorer failed: {_last_line(err, code)}"}
    try:
        return {**_check_score(read_json(raw_path), raw_path), "scored": True}
    except InputError as exc:
        return {"reason": f"scorer failed: {exc}"}


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
