"""The isolated evaluator (docs/contracts.md#the-evaluators-sandbox): validate, then score on hidden
labels.

It runs outside the sandbox, after the program's whole tree is gone, so the program never
holds the labels; its waits give up at the execution's (moving) deadline.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import signal
import stat
import subprocess
import time
from pathlib import Path

from . import sandbox
from .core import statuses
from .core.clock import load_ring, scoring_deadline_for
from .core.errors import InputError
from .core.jsonio import read_json
from .core.layout import RingLayout, is_guard_variant, variant_seed
from .core.node_state import read_result
from .core.records import write_record
from .core.state import LockedTask, Ring
from .core.stop import stop_ring
from .ring.inputs import program_inputs
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


def _run(
    argv: list[str], env: dict, deadline, limit_s: float, log, cwd: str = "/"
) -> tuple[str, str]:
    """Run a scorer or validator in its sandbox: ("done" | "cut" | "timeout", stderr).

    The deadline is re-read at every poll, so a cutoff moved earlier reaches a scorer
    that is already running ("cut", a budget cut); its own time limit is "timeout", a
    failure of the scorer, never a budget cut.
    """
    proc = subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=log, stderr=subprocess.PIPE, text=True,
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


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _finite(value: object) -> bool:
    return _number(value) and math.isfinite(value)


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
    if _number(score) and not _finite(score):
        # NaN or infinity on a valid output: the output has no score (docs/guard.md#scorer-modes).
        return {"score": None, "valid": False, "non_finite": True,
                "reason": f"invalid: the scorer gave a non-finite score ({score!r})"}  # fmt: skip
    if not _finite(score):
        raise InputError(f"{path}: 'score' must be a finite number")
    return {"score": float(score), "valid": True, "reason": reason}


def _check_rows(raw: object, path: Path) -> dict:
    """A rows-mode scorer's record (`scorer_rows: true`): `rows` holds one finite value per
    labelled row, in the labels' own order, and the score is their mean."""
    record = _check_score(raw, path)
    if not record["valid"]:
        return record
    rows = raw.get("rows")
    if isinstance(rows, list) and rows and all(map(_number, rows)) and not all(map(_finite, rows)):
        return {"score": None, "valid": False, "non_finite": True,
                "reason": "invalid: the scorer gave a non-finite row value"}  # fmt: skip
    if not isinstance(rows, list) or not rows or not all(map(_finite, rows)):
        raise InputError(
            f"{path}: a scorer declared with 'scorer_rows: true' must write 'rows': a "
            "non-empty list of finite numbers, one per labelled row"
        )
    values = [float(v) for v in rows]
    return {**record, "score": math.fsum(values) / len(values), "scorer_score": record["score"],
            "rows": values}  # fmt: skip


# Scoring seeds of the guard's bootstrap resamples: the b-th resample of every guard
# execution is drawn with seed BOOTSTRAP_SEED_BASE + b, so both sides of a pair are scored
# on the same rows, and no resample is the rows of a program seed's own score.
BOOTSTRAP_SEED_BASE = 1_000_000


def scorer_mode(task: LockedTask) -> str:
    """ "resample", "rows" or "fixed" (task.yaml, docs/guard.md#scorer-modes); a ring locked
    before modes were declared resamples."""
    return task.mode


def row_resample(rows: int, seed: int) -> list[int]:
    """The row indices of resample `seed` of a rows-mode view: n draws with replacement,
    from random.Random(f"ringflow-rows/{seed}"), so anyone can re-derive them; the same
    seed draws the same rows for every output on the view, which pairs the two sides."""
    rng = random.Random(f"ringflow-rows/{seed}")
    return [rng.randrange(rows) for _ in range(rows)]


def rows_bootstrap(values: list[float], count: int) -> list[float]:
    """The `count` bootstrap scores of a rows-mode output: the mean over resamples
    BOOTSTRAP_SEED_BASE + b, b = 0..count-1."""
    n = len(values)
    return [
        math.fsum(values[i] for i in row_resample(n, BOOTSTRAP_SEED_BASE + b)) / n
        for b in range(count)
    ]


def bootstrap_calls(task: LockedTask, count: int) -> list[tuple[int, list[str]]]:
    """(seed, extra arguments) of each scorer call that yields the `count` bootstrap
    scores: one call with `--bootstrap N` where the task's scorer declares it
    (`scorer_bootstrap: true`), else one call per resample."""
    first = BOOTSTRAP_SEED_BASE
    if task.scorer_bootstrap:
        return [(first, ["--bootstrap", str(count)])]
    return [(first + b, []) for b in range(count)]


NON_FINITE = "non-finite"


def bootstrap_values(raw: object, batched: bool, seed: int) -> tuple[list[float] | None, str]:
    """The scores one bootstrap call gave, or None and why not."""
    values = raw.get("bootstrap") if batched and isinstance(raw, dict) else None
    if not batched and isinstance(raw, dict):
        values = [raw.get("score")]
    if not isinstance(raw, dict) or raw.get("valid") is not True:
        return None, f"no valid score for bootstrap seed {seed}"
    if isinstance(values, list) and all(map(_number, values)) and not all(map(_finite, values)):
        return None, NON_FINITE
    if not isinstance(values, list) or not all(map(_finite, values)):
        return None, (
            f"no bootstrap scores for seed {seed}"
            + (" (expected a list of finite numbers in 'bootstrap')" if batched else "")
        )
    return [float(v) for v in values], ""


def _evaluate(
    ring: Ring, exec_dir: Path, view: str, variant: str, seed: int, deadline=None
) -> dict:
    """Validator first (invalid output never reaches the labels), then the scorer.

    The output must be plain data first: links, FIFOs and devices make it invalid
    before any evaluator reads it. `deadline` (a callable) replaces the execution's own.
    """
    task = ring.task
    config = ring.config
    limit_s = config.scorer_timeout_min * 60
    deadline = deadline or scoring_deadline_for(ring, view, variant)
    pred = exec_dir / "output"
    refused = refuse_pointers(pred)
    if refused is not None:
        return {"valid": False, "reason": f"invalid: {refused}"}
    view_dir = Path(ring.views[view].dir)
    inputs = program_inputs(ring, view, variant)
    info = evaluator_sandbox(ring)
    limits = {**config.evaluator.to_mapping(), "uid": config.sandbox.uid,
              "gid": config.sandbox.gid}  # fmt: skip
    env = evaluator_env(config.limits.threads)
    task_dir = Path(task.dir)
    confined = info["mode"] != "none"
    # Confined, the evaluator sees its folders at neutral paths from the task folder (the
    # sandbox's chdir); unconfined (sandbox.mode: none) it gets the host paths.
    seen = {
        "pred": INSIDE_PRED if confined else pred,
        "inputs": INSIDE_INPUTS if confined else inputs,
        "labels": INSIDE_LABELS if confined else view_dir / "labels",
    }
    cwd = "/" if confined else str(task_dir)
    with open(exec_dir / "scorer.log", "w") as log:
        if task.validator:
            command = [*command_argv(task.validator), "--pred", str(seen["pred"]),
                       "--inputs", str(seen["inputs"])]  # fmt: skip
            argv = evaluator_argv(info, command, task_dir=task_dir, pred=pred, inputs=inputs,
                                  limits=limits)  # fmt: skip
            ended, err = _run(argv, env, deadline, limit_s, log, cwd)
            if ended == "cut":
                return {"budget_cut": True, "reason": "validation cut by the deadline"}
            if ended == "timeout":
                return _evaluator_failed("validator", f"no verdict within {limit_s:.0f} s")
            if ended != "done":
                # Invalid output has no score, with the validator's reason
                # (docs/contracts.md#validator).
                return {"valid": False, "reason": f"invalid: {_last_line(err, ended)}"}

        calls = 0

        def call_scorer(call_seed: int, extra: list[str]):
            """One scorer call: (how it ended, its stderr, its output file)."""
            nonlocal calls
            calls += 1
            record_dir = reset_dir(exec_dir / "scoring")
            loan = _lend(info, record_dir, limits)
            out = (INSIDE_RECORD if confined else record_dir) / "score.json"
            command = [
                *command_argv(task.scorer),
                *("--pred", str(seen["pred"]), "--labels", str(seen["labels"])),
                *("--seed", str(call_seed), "--out", str(out)),
                *extra,
            ]
            argv = evaluator_argv(info, command, task_dir=task_dir, pred=pred,
                                  labels=view_dir / "labels", record_dir=record_dir,
                                  limits=limits)  # fmt: skip
            try:
                ended, err = _run(argv, env, deadline, limit_s, log, cwd)
            finally:
                if loan is not None:
                    loan.take_back()
            log.write(err)
            return ended, err, record_dir / "score.json"

        mode = scorer_mode(task)
        record = _scorer_record(*call_scorer(seed, []), limit_s, rows=mode == "rows")
        final_run = view == ring.final_view and variant == "s0"
        if (is_guard_variant(variant) or final_run) and record.get("valid"):
            count = config.guard.bootstrap
            if mode == "rows":
                record["bootstrap"] = rows_bootstrap(record["rows"], count)
                record["bootstrap_seeds"] = {
                    "first": BOOTSTRAP_SEED_BASE,
                    "count": count,
                    "drawn_by": "ringflow",
                    "rows": len(record["rows"]),
                }
            elif mode == "fixed":
                # One number per output (scorer_resamples: false): no rows to resample,
                # so the guard's bound covers the programs' own noise only.
                record["bootstrap"] = [record["score"]] * count
                record["bootstrap_seeds"] = {"first": None, "count": count, "drawn_by": None}
            else:
                resampled = _bootstrap(task, count, call_scorer, limit_s)
                if not final_run:
                    record.update(resampled)
                elif "bootstrap" in resampled:
                    # On the final view the resamples only give the improvement its
                    # interval: without them the run keeps its score.
                    record.update(bootstrap=resampled["bootstrap"],
                                  bootstrap_seeds=resampled["bootstrap_seeds"])  # fmt: skip
    # How many times the scorer ran: the reserve prices a guard run's bootstrap from it.
    record["scorer_calls"] = calls
    return record


def _scorer_record(
    ended: str, err: str, raw_path: Path, limit_s: float, rows: bool = False
) -> dict:
    if ended == "cut":
        return {"budget_cut": True, "reason": "scoring cut by the deadline"}
    if ended == "timeout":
        return _evaluator_failed("scorer", f"no score within {limit_s:.0f} s")
    if ended != "done" or not _regular_file(raw_path):
        return _evaluator_failed("scorer", _last_line(err, ended))
    try:
        checked = (_check_rows if rows else _check_score)(read_json(raw_path), raw_path)
        return {**checked, "scored": True}
    except InputError as exc:
        return _evaluator_failed("scorer", str(exc))


def _bootstrap(task: dict, count: int, call_scorer, limit_s: float) -> dict:
    """A guard execution's `count` bootstrap scores (docs/operations.md#final-selection), added to
    its score record; a scorer that cannot give them fails like any scorer failure."""
    scores: list[float] = []
    calls = bootstrap_calls(task, count)
    for seed, extra in calls:
        ended, err, raw_path = call_scorer(seed, extra)
        if ended == "cut":
            return {"scored": False, "score": None, "valid": False, "budget_cut": True,
                    "reason": "bootstrap scoring cut by the deadline"}  # fmt: skip
        if ended != "done" or not _regular_file(raw_path):
            why = _last_line(err, ended) if ended != "timeout" else f"no score in {limit_s:.0f} s"
            return _bootstrap_failed(why)
        try:
            raw = read_json(raw_path)
        except InputError as exc:
            return _bootstrap_failed(str(exc))
        values, why = bootstrap_values(raw, bool(extra), seed)
        if values is None and why == NON_FINITE:
            return {"scored": True, "score": None, "valid": False, "non_finite": True,
                    "reason": f"invalid: the scorer gave a non-finite bootstrap score "
                    f"(seed {seed})"}  # fmt: skip
        if values is None:
            return _bootstrap_failed(why)
        scores += values
    if len(scores) != count:
        return _bootstrap_failed(f"{len(scores)} scores, expected {count}")
    return {"bootstrap": scores, "bootstrap_seeds": {"first": BOOTSTRAP_SEED_BASE, "count": count}}


def _bootstrap_failed(why: str) -> dict:
    return {"scored": False, "score": None, **_evaluator_failed("scorer", f"bootstrap: {why}")}


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


def evaluator_sandbox(ring: Ring) -> dict:
    """The sandbox the ring was locked with (probed on this host once per boot)."""
    if ring.config.sandbox.mode == "none":
        return {"mode": "none"}
    return sandbox.require_sandbox(ring.config.sandbox, cache_dir=ring.layout.probes)


def _count_evaluator_failure(ring: Ring, layout: RingLayout, node: str, record: dict) -> None:
    """A failing scorer on the baseline, or on scorer_fail_stop nodes, stops the ring."""
    index = read_json(layout.nodes_index) if layout.nodes_index.exists() else {}
    which = record["evaluator_failed"]
    if node == index.get("baseline"):
        raise stop_ring(layout.root, f"the task's {which} failed on the baseline's output "
                        f"({record['reason']})", cause="task", node=node)  # fmt: skip
    folder = layout.root / "evaluator_failures"
    folder.mkdir(exist_ok=True)
    (folder / node).touch()
    failed = sorted(p.name for p in folder.iterdir())
    limit = ring.config.scorer_fail_stop
    if len(failed) >= limit:
        raise stop_ring(layout.root, f"the task's {which} failed on {len(failed)} distinct "
                        f"nodes ({', '.join(failed)}); last: {record['reason']}",
                        cause="task", nodes=failed)  # fmt: skip


def score_execution(ring_dir: str | Path, node: str, view: str, variant: str) -> dict:
    ring = load_ring(ring_dir)
    layout = RingLayout(Path(ring.ring_dir))
    result = read_result(layout.result(node, view, variant))
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
    if result.status != statuses.OK:
        record["reason"] = f"not scored: execution {result.status}"
    else:
        started = time.time()
        record.update(_evaluate(ring, layout.exec_dir(node, view, variant), view, variant, seed))
        record["scoring_s"] = time.time() - started
    write_record(layout.root, layout.score(node, view, variant), record)
    if record.get("evaluator_failed"):
        _count_evaluator_failure(ring, layout, node, record)
    elif record.get("non_finite"):
        _refuse_non_finite_baseline(layout, node, record)
    elif record.get("valid") and _first_baseline_score(ring, layout, node, view, variant):
        _refuse_seed_blind_scorer(ring, layout, node, view, seed, record["score"])
    return record


def _is_baseline(layout: RingLayout, node: str) -> bool:
    index = read_json(layout.nodes_index) if layout.nodes_index.exists() else {}
    return node == index.get("baseline")


def _refuse_non_finite_baseline(layout: RingLayout, node: str, record: dict) -> None:
    """A non-finite score on a candidate makes that run invalid and is not counted against
    the scorer; on the baseline it stops the ring, as any baseline scorer failure does."""
    if _is_baseline(layout, node):
        raise stop_ring(layout.root, f"the task's scorer failed on the baseline's output "
                        f"({record['reason']})", node=node)  # fmt: skip


def _first_baseline_score(ring: Ring, layout: RingLayout, node: str, view: str, variant: str):
    """The baseline's seed-0 score on the first search view: its scorer is checked there
    once per ring (the lock has no output to score)."""
    return (
        variant == "s0"
        and view == ring.search_views[0]
        and scorer_mode(ring.task) == "resample"
        and _is_baseline(layout, node)
    )


def _refuse_seed_blind_scorer(
    ring, layout: RingLayout, node: str, view: str, seed: int, score: float
) -> None:
    """Score the baseline's output under other seeds; a scorer that ignores the seed stops
    the ring with how to declare what it is (docs/guard.md#scorer-modes)."""
    from .scorer_modes import resample_verdict

    exec_dir = layout.exec_dir(node, view, "s0")

    def score_with(other: int) -> dict:
        return _evaluate(ring, exec_dir, view, "s0", other)

    problem = resample_verdict(score_with, seed, score)
    if problem is not None:
        raise stop_ring(layout.root, problem, node=node)


def read_score(layout: RingLayout, node: str, view: str, variant: str) -> dict | None:
    path = layout.score(node, view, variant)
    return read_json(path) if path.exists() else None


def usable(score: dict | None, direction: str) -> float | None:
    """The number a ranking uses, or None when the execution has no usable score.

    Invalid output has no score in either direction (docs/contracts.md#scorer): it ranks below every
    scored node, and never counts as a number. `direction` is kept for callers' symmetry.
    """
    if score is None or not score.get("scored") or not score.get("valid"):
        return None
    value = score.get("score")
    return None if value is None else float(value)


def evaluate_predictions(ring: Ring, folder: Path, view: str, seed: int, deadline=None) -> dict:
    """Validate and score the predictions in folder/output on one view (a score query, a
    background evaluation); the same evaluator as an execution's, writing its logs into
    folder. `deadline` (a callable) cuts it earlier than a seed-0 execution's scoring."""
    return _evaluate(ring, folder, view, "s0", seed, deadline)
