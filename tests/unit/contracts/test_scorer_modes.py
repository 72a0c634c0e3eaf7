"""The three scorer modes: declared in task.yaml, checked by `ringflow check` before a
ring spends anything; non-finite scores; the guard's edges (zero spread, alpha',
too few bootstrap resamples)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ringflow.config import guard_problems
from ringflow.core.errors import InputError
from ringflow.guardstats import min_bootstrap, paired_bootstrap_lcb
from ringflow.scoring import _check_rows, _check_score
from ringflow.task import load_task
from ringtools import SCORER, full_config, make_candidate, make_task

# The scripted scorer with a resample: the score moves with --seed (mode a).
RESAMPLING_SCORER = SCORER.replace(
    'rec = {"score": float(value),',
    'rec = {"score": float(value) + random.Random(a.seed).uniform(-0.01, 0.01),',
)


def declare(task: Path, **keys) -> Path:
    spec = yaml.safe_load((task / "task.yaml").read_text())
    spec.pop("scorer_resamples", None)
    (task / "task.yaml").write_text(yaml.safe_dump({**spec, **keys}))
    return task


def ringflow_check(task: Path, cand: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ringflow", "check", str(task), str(cand)],
                          capture_output=True, text=True)  # fmt: skip


def test_task_yaml_declares_the_mode(tmp_path):
    task = make_task(tmp_path)
    assert load_task(task).scorer_mode == "fixed"  # the scripted task says so
    assert load_task(declare(task)).scorer_mode == "resample"
    assert load_task(declare(task, scorer_rows=True, scorer_bootstrap=False)).scorer_mode == "rows"
    with pytest.raises(InputError, match="contradict"):
        load_task(declare(task, scorer_rows=True, scorer_resamples=False))
    with pytest.raises(InputError, match="exclude each other"):
        load_task(declare(task, scorer_rows=True, scorer_bootstrap=True))
    with pytest.raises(InputError, match="'scorer_resamples' must be true or false"):
        load_task(declare(task, scorer_resamples="no"))


def test_check_refuses_an_undeclared_seed_ignoring_scorer_and_says_how_to_fix_it(tmp_path):
    task = declare(make_task(tmp_path))
    cand = make_candidate(tmp_path / "cands" / "a", mean=0.5)
    done = ringflow_check(task, cand)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL  the scorer gave the same score (0.5) for one output under seeds" in done.stdout
    assert "ignores --seed" in done.stdout
    for how in ("(a) let `--seed N` draw", "(b) `scorer_rows: true`", "scorer_resamples: false"):
        assert how in done.stdout
    declare(task, scorer_resamples=False)
    done = ringflow_check(task, cand)
    assert done.returncode == 0, done.stdout
    assert "covers the programs' own noise only" in done.stdout or "noise only" in done.stdout


def test_check_accepts_a_resampling_scorer(tmp_path):
    task = declare(make_task(tmp_path))
    (task / "scorer.py").write_text(RESAMPLING_SCORER)
    done = ringflow_check(task, make_candidate(tmp_path / "cands" / "a", mean=0.5))
    assert done.returncode == 0, done.stdout
    assert "the score changes with --seed" in done.stdout


def test_check_says_what_a_scorer_without_bootstrap_will_cost_the_guard(tmp_path):
    task = declare(make_task(tmp_path), scorer_bootstrap=False)
    (task / "scorer.py").write_text(RESAMPLING_SCORER)
    done = ringflow_check(task, make_candidate(tmp_path / "cands" / "a", mean=0.5))
    assert done.returncode == 0, done.stdout  # a cost to know of, not a fault
    warning = next(line for line in done.stdout.splitlines() if "no scorer_bootstrap" in line)
    assert "200 more times (guard.bootstrap, one scorer call per resample" in warning
    assert "scorer_bootstrap: true" in warning and " s per run)" in warning
    with_batch = declare(task, scorer_bootstrap=True)
    (with_batch / "scorer.py").write_text(RESAMPLING_SCORER)
    assert "no scorer_bootstrap" not in ringflow_check(with_batch, tmp_path / "cands" / "a").stdout


def test_a_rows_scorer_gives_one_value_per_row(tmp_path):
    path = tmp_path / "score.json"
    record = _check_rows({"score": 0.5, "valid": True, "rows": [1, 0, 1, 1]}, path)
    assert record["score"] == 0.75 and record["rows"] == [1.0, 0.0, 1.0, 1.0]
    with pytest.raises(InputError, match="must write 'rows'"):
        _check_rows({"score": 0.5, "valid": True}, path)
    bad = _check_rows({"score": 0.5, "valid": True, "rows": [1.0, float("nan")]}, path)
    assert bad["non_finite"] and not bad["valid"] and bad["score"] is None


def test_a_non_finite_score_is_an_invalid_output_not_a_scorer_failure(tmp_path):
    for value in (float("nan"), float("inf"), float("-inf")):
        record = _check_score({"score": value, "valid": True, "reason": ""}, tmp_path / "s")
        why = f"invalid: the scorer gave a non-finite score ({value!r})"
        assert record == {"score": None, "valid": False, "non_finite": True, "reason": why}
    with pytest.raises(InputError, match="finite number"):
        _check_score({"score": "0.5", "valid": True}, tmp_path / "s")


def table(values):
    return {"g": {3: list(values), 4: list(values)}}


def test_zero_spread_is_judged_against_the_difference_never_the_scale():
    # Scores near 1e7, a consistent advantage of 5 with a little real spread: a bound.
    base = [1e7 + 0.001 * (b % 7) for b in range(200)]
    cand = [v + 5 + 0.01 * ((b * 13) % 11) for b, v in enumerate(base)]
    stats = paired_bootstrap_lcb(table(cand), table(base), alpha=0.05, direction="maximize")
    assert stats["lcb"] is not None and stats["lcb"] > 4.9
    # Identical replicates give no bound, whatever their difference.
    same = paired_bootstrap_lcb(table([1e7 + 5] * 200), table([1e7] * 200), alpha=0.05,
                                direction="maximize")  # fmt: skip
    assert same["lcb"] is None and "no spread" in same["reason"]


def test_too_few_bootstrap_resamples_for_the_quantile_are_refused():
    assert min_bootstrap(3, 0.05) == 60 and min_bootstrap(1, 0.05) == 20
    config = full_config(final_top_k=3, guard={"bootstrap": 40})
    (problem,) = guard_problems(config)
    assert "guard.bootstrap = 40" in problem and "at least 60" in problem
    assert guard_problems(full_config(final_top_k=3, guard={"bootstrap": 60})) == []
    assert guard_problems(full_config(final_top_k=1, guard={"bootstrap": 20})) == []


def test_the_ring_is_refused_at_its_lock(tmp_path):
    from ringflow.ring.lock import lock_ring

    make_candidate(tmp_path / "cands" / "a", mean=0.5)
    config = full_config(ring_id="few", task=str(make_task(tmp_path)),
                         candidates=str(tmp_path / "cands"), baseline=None, final_top_k=3,
                         guard={"bootstrap": 59})  # fmt: skip
    with pytest.raises(InputError, match=r"guard\.bootstrap = 59"):
        lock_ring(config, tmp_path)


def test_check_estimates_the_guard_s_power_from_the_baseline(tmp_path):
    task = make_task(tmp_path, roles={"search": ["proxy"], "guard": ["guard"], "final": "final"})
    cand = make_candidate(tmp_path / "cands" / "a", mean=0.5)
    base = make_candidate(tmp_path / "base" / "baseline", mean=0.5, sd=0.02)
    done = subprocess.run([sys.executable, "-m", "ringflow", "check", str(task), str(cand),
                           "--baseline", str(base)], capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    line = next(x for x in done.stdout.splitlines() if "smallest advantage" in x)
    detectable = float(line.split("detect: ")[1].split()[0])
    # Two probe runs of SD 0.02 over 5 guard seeds: z(1 - 0.05/3) * sqrt(2 var / 5), within
    # the spread of a two-run variance estimate.
    assert 0 < detectable < 0.2 and "5 guard seeds" in line
    done = ringflow_check(task, cand)
    assert "skipped: no baseline given (--baseline DIR)" in done.stdout


def test_scores_that_differ_in_their_last_bits_are_the_same_predictions():
    # A program that makes the baseline's predictions, scored by a scorer that sums the
    # rows in another order: the same scores but for rounding, which bound nothing.
    base = [3.05 + 0.01 * (b % 7) for b in range(200)]
    rounded = [v + (2.2e-15 if b % 3 else -4.4e-16) for b, v in enumerate(base)]
    stats = paired_bootstrap_lcb(table(rounded), table(base), alpha=0.05, direction="minimize")
    assert stats["lcb"] is None
    assert stats["reason"].startswith("the paired difference has no spread: both programs")
    # A real difference in the seventh decimal still is one.
    near = [v + 3e-7 * (1 + b % 5) for b, v in enumerate(base)]
    stats = paired_bootstrap_lcb(table(near), table(base), alpha=0.05, direction="minimize")
    assert stats["lcb"] is not None and stats["lcb"] < 0
