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


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _check_score(raw: object, path: Path) -> dict:
    """The scorer's verdict. Invalid output has no score, whatever number came with it."""
    if not isinstance(raw, dict):
        raise InputError(f"{path}: scorer output must be a JSON object")
    score, valid, reason = raw.get("score"), raw.get("valid"), raw.get("reason", "")
    if not isinstance(valid, bool):
        raise InputError(f"{path}: 'valid' must be true or false")
    if not isinstance(reason, str):
        raise InputError(f"{path}: 'reason' must be a string")
    if not valid:
        return {"score": None, "valid": False, "reason": reason or "invalid output"}
    if not _finite(score):
        raise InputError(f"{path}: 'score' must be a finite number")
    return {"score": float(score), "valid": True, "reason": reason}


# Scoring seeds of the guard's bootstrap resamples: the b-th resample of every guard
# execution is drawn with seed BOOTSTRAP_SEED_BASE + b, so both sides of a pair are scored
# on the same rows, and no resample is the rows of a program seed's own score.
BOOTSTRAP_SEED_BASE = 1_000_000


def _bootstrap(task: dict, base_argv: list[str], count: int, exec_dir: Path, deadline, log):
    """`count` bootstrap scores: one call with `--bootstrap N` where the task's scorer
    declares it (`scorer_bootstrap: true`), else one call per resample. (scores, None) or
    (None, reason); reason "deadline" when time ran out."""
    out = exec_dir / "score.bootstrap.json"
    first = BOOTSTRAP_SEED_BASE
    calls = (
        [(first, ["--bootstrap", str(count)])]
        if task.get("scorer_bootstrap")
        else [(first + b, []) for b in range(count)]
    )
    scores: list[float] = []
    for seed, extra in calls:
        out.unlink(missing_ok=True)
        argv = [*base_argv, "--seed", str(seed), "--out", str(out), *extra]
        code, err = _run(argv, task["dir"], deadline, log)
        log.write(err)
        if code is None:
            return None, "deadline"
        if code != 0 or not out.exists():
            return None, f"scorer failed on bootstrap seed {seed}: {_last_line(err, code)}"
        try:
            raw = read_json(out)
        except InputError as exc:
            return None, f"scorer failed on bootstrap seed {seed}: {exc}"
        values = raw.get("bootstrap") if extra else [raw.get("score")]
        if not raw.get("valid") or not isinstance(values, list) or not all(map(_finite, values)):
            return None, (
                f"scorer gave no valid bootstrap scores for seed {seed}"
                + (f" (expected a list of {count} finite numbers in 'bootstrap')" if extra else "")
            )
        scores += [float(v) for v in values]
    out.unlink(missing_ok=True)
    if len(scores) != count:
        return None, f"scorer returned {len(scores)} bootstrap scores, expected {count}"
    return scores, None


def _evaluate(ring: dict, exec_dir: Path, view: str, variant: str, seed: int) -> dict:
    """Validator first (invalid output never reaches the labels), then the scorer."""
    task = ring["task"]
    limit_s = ring["config"]["scorer_timeout_min"] * 60
    deadline = min(scoring_deadline_for(ring, view, variant)(), time.time() + limit_s)
    pred = exec_dir / "output"
    view_dir = Path(ring["views"][view]["dir"])
    from .selection.disguise import BLIND_COPIES

    if variant in BLIND_COPIES:
        from .selection.disguise import disguised_inputs

        inputs = disguised_inputs(ring, view, BLIND_COPIES[variant])
    else:
        inputs = view_dir / "inputs"
    with open(exec_dir / "scorer.log", "w") as log:
        if task["validator"]:
            argv = [*command_argv(task["validator"]), "--pred", str(pred), "--inputs", str(inputs)]
            code, err = _run(argv, task["dir"], deadline, log)
            if code is None:
                return {"budget_cut": True, "reason": "validation cut by the deadline"}
            if code != 0:
                # Invalid output has no score, only its reason (SPEC 4, 8).
                why = _last_line(err, code)
                return {"score": None, "valid": False, "scored": True, "reason": f"invalid: {why}"}
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
            record = {**_check_score(read_json(raw_path), raw_path), "scored": True}
        except InputError as exc:
            return {"reason": f"scorer failed: {exc}"}
        if is_guard_variant(variant) and record["valid"]:
            count = ring["config"]["guard"]["bootstrap"]
            base_argv = [*command_argv(task["scorer"]), "--pred", str(pred),
                         "--labels", str(view_dir / "labels")]  # fmt: skip
            values, why = _bootstrap(task, base_argv, count, exec_dir, deadline, log)
            if why == "deadline":
                return {"budget_cut": True, "reason": "bootstrap scoring cut by the deadline"}
            if why:
                return {"reason": why}
            record["bootstrap"] = values
            record["bootstrap_seeds"] = {"first": BOOTSTRAP_SEED_BASE, "count": count}
        return record


def is_guard_variant(variant: str) -> bool:
    return variant.startswith("g") and variant[1:].isdigit()


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

    Invalid output has no score in either direction (SPEC 4, 8): it ranks below every
    scored node, and never counts as a number. `direction` is kept for callers' symmetry.
    """
    if score is None or not score.get("scored") or not score.get("valid"):
        return None
    value = score.get("score")
    return None if value is None else float(value)
