"""Best so far (issue: the search phase, item 7) and the public validator handed to
sessions (item 5): a changed tree hash only, no free slot -> skipped, a real background
evaluation in the sandbox, cut at the session's end, the ring's best-so-far curve."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from ringflow.core.clock import load_node, load_ring
from ringflow.core.jsonio import atomic_write_json, read_json
from ringflow.core.layout import RingLayout
from ringflow.core.state import LockedTask
from ringflow.reporting.report import best_so_far_curve
from ringflow.reporting.summary import progress_lines
from ringflow.search import best_so_far, public_validator
from ringflow.search.best_so_far import (
    EVALUATE,
    NO_SLOT,
    NOT_RUNNABLE,
    UNCHANGED,
    BackgroundEvaluator,
    decide,
    ring_progress,
)
from ringflow.search.validate_runner import absolute_args
from ringtools import VALIDATOR, locked_ring, make_candidate

PROGRAM = """\
import json, os, sys, time
print("nice=%d" % os.nice(0), file=sys.stderr)
time.sleep({sleep})
with open(os.path.join(os.environ["RINGFLOW_OUTPUT_DIR"], "score.json"), "w") as f:
    json.dump({{"value": {value}}}, f)
"""


def write_program(workspace: Path, value: float, sleep: float = 0) -> None:
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "run.py").write_text(PROGRAM.format(value=value, sleep=sleep))


def in_background_thread(call):
    """`call` in a thread at the priority the evaluator's own thread takes."""
    out = []

    def run():
        best_so_far.lower_priority()
        out.append(call())

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return out[0]


def test_only_a_changed_runnable_program_in_a_free_slot_is_evaluated():
    assert decide(None, None, 4) == NOT_RUNNABLE
    assert decide(None, "abc", 4) == NOT_RUNNABLE
    assert decide("abc", "abc", 4) == UNCHANGED
    assert decide("abc", "abc", 0) == UNCHANGED  # nothing to do: not even a skip
    assert decide("abd", "abc", 0) == NO_SLOT
    assert decide("abd", "abc", -1) == NO_SLOT
    assert decide("abd", "abc", 1) == EVALUATE
    assert decide("abd", None, 1) == EVALUATE


def _ring(tmp_path, **overrides):
    make_candidate(tmp_path / "cands" / "a", mean=0.5)
    ring_dir = locked_ring(tmp_path, tmp_path / "cands", "bsf", tree_ignore=["METHOD.md"],
                           **overrides)  # fmt: skip
    ring = load_ring(ring_dir)
    layout = RingLayout(ring_dir)
    return ring, layout, load_node(ring, "n001-a")


def _slots(layout: RingLayout, cores: int) -> None:
    atomic_write_json(layout.slots, {"cores": cores, "jobs": None, "gpus": None,
                                     "gpus_per_execution": 1, "at": time.time()})  # fmt: skip


def _in_flight(layout: RingLayout) -> Path:
    """An execution running now, as the ring sees one: health sampled, no result yet."""
    health = layout.exec_dir("n001-a", "proxy", "s0") / "health"
    health.mkdir(parents=True)
    atomic_write_json(health / "health_latest.json", {"wall": time.time()})
    return health.parent


def test_a_changed_tree_hash_is_evaluated_once_and_no_free_slot_skips_the_tick(tmp_path):
    ring, layout, node = _ring(tmp_path)
    workspace = tmp_path / "workspace"
    write_program(workspace, 0.25)
    _slots(layout, cores=1)
    evaluator = BackgroundEvaluator(ring, layout, node, workspace, lambda: time.time() + 120)
    # The workspace as handed over is not the engineer's work.
    assert evaluator.tick() == UNCHANGED
    write_program(workspace, 0.5)
    running = _in_flight(layout)
    assert best_so_far.free_slots(ring, layout) == 0
    assert evaluator.tick() == NO_SLOT
    [skipped] = best_so_far.records(layout, "n001-a")
    assert skipped["status"] == "skipped" and "no free execution slot" in skipped["reason"]
    assert skipped["tree_hash"] == best_so_far.workspace_hash(ring, workspace)
    # The execution ended: the slot is free, the changed program is evaluated for real.
    (running / "result.json").write_text("{}")
    assert best_so_far.free_slots(ring, layout) == 1
    assert in_background_thread(evaluator.tick) == EVALUATE
    row = best_so_far.records(layout, "n001-a")[-1]
    assert row["status"] == "scored" and row["score"] == 0.5 and row["valid"], row
    assert row["view"] == "proxy" and row["eval"] == 1 and 0 < row["t"] < 3600
    assert row["tree_hash"] == best_so_far.workspace_hash(ring, workspace)
    logs = layout.node_dir("n001-a") / "best_so_far" / "1"
    assert "nice=19" in (logs / "stderr.log").read_text()  # the lowest priority
    assert not (logs / "output").exists() and not list(layout.boxes.iterdir())
    # Unchanged, or changed only where tree_ignore looks away: nothing more runs.
    assert evaluator.tick() == UNCHANGED
    (workspace / "METHOD.md").write_text("a note the program never reads\n")
    assert evaluator.tick() == UNCHANGED
    (workspace / "run.py").write_text("this is not python(\n")
    assert evaluator.tick() == NOT_RUNNABLE
    assert len(best_so_far.records(layout, "n001-a")) == 2
    # A record for the report only: the node and its queries are untouched.
    assert read_json(layout.node_json("n001-a"))["status"] == node.status
    assert not (layout.node_dir("n001-a") / "queries.jsonl").exists()


def test_a_background_evaluation_running_elsewhere_takes_a_slot(tmp_path):
    ring, layout, _ = _ring(tmp_path)
    _slots(layout, cores=2)
    assert best_so_far.free_slots(ring, layout) == 2
    with best_so_far.slot_taken(ring, layout, "n001-a") as taken:
        assert taken
        # Another process (another session's evaluator) sees the marker held.
        probe = ("from ringflow.core.clock import load_ring; from ringflow.core.layout import "
                 "RingLayout; from ringflow.search.best_so_far import free_slots; "
                 f"print(free_slots(load_ring({str(layout.root)!r}), "
                 f"RingLayout(__import__('pathlib').Path({str(layout.root)!r}))))")  # fmt: skip
        seen = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
        assert seen.stdout.strip() == "1", seen.stderr
        with best_so_far.slot_taken(ring, layout, "n002-b") as second:
            assert second
            with best_so_far.slot_taken(ring, layout, "n003-c") as third:
                assert not third
    assert best_so_far.free_slots(ring, layout) == 2  # a marker left behind holds nothing


def test_an_evaluation_is_cut_at_the_sessions_end_and_recorded(tmp_path):
    # A long grace in the ring is not waited for: the evaluation keeps no checkpoint.
    ring, layout, node = _ring(tmp_path, exec_health={"term_grace_s": 30})
    workspace = tmp_path / "workspace"
    evaluator = BackgroundEvaluator(ring, layout, node, workspace, lambda: time.time() + 120)
    write_program(workspace, 0.5, sleep=60)
    text = (workspace / "run.py").read_text()
    (workspace / "run.py").write_text("import signal\nsignal.signal(signal.SIGTERM, "
                                      "signal.SIG_IGN)\n" + text)  # fmt: skip
    started = time.time()
    stopper = threading.Timer(2.0, evaluator.end)  # the session ends
    stopper.start()
    assert evaluator.tick() == EVALUATE
    took = time.time() - started
    row = best_so_far.records(layout, "n001-a")[-1]
    assert row["status"] == "cut" and row["score"] is None and not row["valid"], row
    # SIGTERM, at most GRACE_S (the ring's term_grace_s is not waited for), SIGKILL.
    assert took < 2.0 + best_so_far.GRACE_S + 4, took
    evaluator.stop()
    assert read_json(layout.node_json("n001-a"))["status"] == node.status


def test_a_failing_program_is_recorded_with_its_reason(tmp_path):
    ring, layout, node = _ring(tmp_path)
    workspace = tmp_path / "workspace"
    evaluator = BackgroundEvaluator(ring, layout, node, workspace, lambda: time.time() + 120)
    workspace.mkdir()
    (workspace / "run.py").write_text("import sys\nsys.exit('no model yet')\n")
    assert evaluator.tick() == EVALUATE
    row = best_so_far.records(layout, "n001-a")[-1]
    assert row["status"] == "crash" and row["score"] is None, row


def test_the_rings_curve_joins_seed0_runs_and_background_evaluations(tmp_path):
    ring, layout, _ = _ring(tmp_path)
    start = ring.start
    for node, value, ended in (("n001-a", 0.4, 30.0), ("n002-x", 0.2, 10.0)):
        folder = layout.exec_dir(node, "proxy", "s0")
        folder.mkdir(parents=True)
        atomic_write_json(folder / "result.json", {"status": "ok", "ended_at": start + ended})
        atomic_write_json(folder / "score.json", {"scored": True, "valid": True, "score": value})
    invalid = layout.exec_dir("n003-y", "proxy", "s0")
    invalid.mkdir(parents=True)
    atomic_write_json(invalid / "result.json", {"status": "ok", "ended_at": start + 1})
    atomic_write_json(invalid / "score.json", {"scored": False, "valid": False, "score": None})
    record = best_so_far.record_path(layout, "n004-z")
    record.parent.mkdir(parents=True)
    rows = [{"t": 5.0, "status": "scored", "score": 0.1, "eval": 1, "tree_hash": "h1"},
            {"t": 20.0, "status": "skipped", "reason": "no free execution slot"},
            {"t": 25.0, "status": "invalid", "score": None, "eval": 2},
            {"t": 40.0, "status": "scored", "score": 0.9, "eval": 3}]  # fmt: skip
    record.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"t": 50, "sta')
    progress = ring_progress(ring, layout)
    assert [(p["t"], p["score"], p["source"]) for p in progress["points"]] == [
        (5.0, 0.1, "background"), (10.0, 0.2, "execution"), (30.0, 0.4, "execution"),
        (40.0, 0.9, "background")]  # fmt: skip
    assert [s["score"] for s in progress["steps"]] == [0.1, 0.2, 0.4, 0.9]
    assert progress["first_valid"]["node"] == "n004-z" and progress["first_valid"]["t"] == 5.0
    assert progress["best"]["score"] == 0.9
    assert progress["background"]["n004-z"] == {"evaluations": 3, "scored": 2, "skipped": 1}
    curve = best_so_far_curve(progress)
    assert len(curve["points"]) == 4 and curve["path"].count(",") == 1 + 2 * 3 + 1
    lines = progress_lines(progress)
    assert "0.9000 (n004-z, after 40 s)" in lines[0] and "not ranked" not in lines[0]
    # A best run of a node without a seed-0 mean (it failed another search view) says so.
    del progress["steps"][-1]
    progress["best"] = progress["steps"][-1]
    assert progress["best"]["source"] == "execution"
    node = progress["best"]["node"]
    said = progress_lines(progress, frozenset({node}))[0]
    assert said.endswith(f"({node} is not ranked: a search view has no valid seed-0 score)")
    lines = progress_lines(ring_progress(ring, layout))
    assert "first valid result after 5.0 s" in lines[0]  # tenths under 10 s
    assert lines[1] == "background evaluations: 3 (2 scored)"
    # Minimising, the best is the lowest.
    ring = dataclasses.replace(ring, task=dataclasses.replace(ring.task, direction="minimize"))
    assert ring_progress(ring, layout)["best"]["score"] == 0.1


# ---- the public validator (item 5) ------------------------------------------------------


def _task(tmp_path: Path, validator: str, scorer: str = "python scorer.py") -> LockedTask:
    task = tmp_path / "task"
    (task / "views" / "proxy" / "inputs").mkdir(parents=True)
    (task / "views" / "proxy" / "labels").mkdir(parents=True)
    (task / "views" / "proxy" / "inputs" / "data.txt").write_text("data\n")
    (task / "scorer.py").write_text("print('scorer')\n")
    (task / "validator.py").write_text(VALIDATOR)
    return LockedTask.from_record({"dir": str(task), "validator": validator, "scorer": scorer})


def test_the_public_validator_is_withheld_when_it_shares_the_scorers_files(tmp_path):
    shipped_none = LockedTask(dir=str(tmp_path), validator=None, scorer="x")
    assert public_validator.refusal(shipped_none) == "the task ships no validator"
    assert public_validator.refusal(_task(tmp_path, "python validator.py")) is None
    assert "scorer's command uses too" in public_validator.refusal(
        _task(tmp_path / "2", "python scorer.py --check"))  # fmt: skip
    assert "labels" in public_validator.refusal(
        _task(tmp_path / "3", "python validator.py --ref views/proxy/labels"))  # fmt: skip
    assert "labels" in public_validator.refusal(_task(tmp_path / "4", "python validator.py ."))


def test_the_copy_holds_the_validator_only_and_runs_it_from_relative_paths(tmp_path):
    task = _task(tmp_path, f"python {tmp_path / 'task' / 'validator.py'} --strict")
    folder = tmp_path / "copy"
    validate = public_validator.make_copy(task, folder, python=sys.executable,
                                          runner=str(public_validator.RUNNER),
                                          inside=str(folder))  # fmt: skip
    assert sorted(p.name for p in (folder / "files").iterdir()) == ["validator.py"]
    command = read_json(folder / "command.json")["argv"]
    assert command[1] == "validator.py" and str(tmp_path / "task") not in json.dumps(command)
    assert not os.access(folder / "files" / "validator.py", os.W_OK) or os.geteuid() == 0
    pred = tmp_path / "work" / "pred"
    pred.mkdir(parents=True)
    inputs = tmp_path / "task" / "views" / "proxy" / "inputs"
    # --strict is the task's own argument: this validator refuses unknown ones.
    (pred / "score.json").write_text('{"value": 0.4}')
    run = subprocess.run([str(validate), "--pred", "pred", "--inputs", str(inputs)],
                         cwd=tmp_path / "work", capture_output=True, text=True)  # fmt: skip
    assert run.returncode == 2 and "--strict" in run.stderr  # the task's argv, untouched
    task = dataclasses.replace(task, validator="python validator.py")
    folder2 = tmp_path / "copy2"
    validate = public_validator.make_copy(task, folder2, python=sys.executable,
                                          runner=str(public_validator.RUNNER),
                                          inside=str(folder2))  # fmt: skip
    run = subprocess.run([str(validate), "--pred", "pred", f"--inputs={inputs}"],
                         cwd=tmp_path / "work", capture_output=True, text=True)  # fmt: skip
    assert run.returncode == 0, run.stderr
    (pred / "score.json").write_text('{"value": 7}')
    run = subprocess.run([str(validate), "--pred", "pred", "--inputs", str(inputs)],
                         cwd=tmp_path / "work", capture_output=True, text=True)  # fmt: skip
    assert run.returncode == 1 and "value 7 is not a number in [0, 1]" in run.stderr


def test_validator_paths_are_made_absolute():
    cwd = os.getcwd()
    assert absolute_args(["--pred", "p", "--inputs=i", "--x", "y"]) == [
        "--pred", f"{cwd}/p", f"--inputs={cwd}/i", "--x", "y"]  # fmt: skip
