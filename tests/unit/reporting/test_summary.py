"""The summary a newcomer reads: the decision first with how much better it is, a node's
row saying what happened to it, a continuation's changed keys, the deploy command, and
the words it uses explained."""

from __future__ import annotations

import json
import shlex
import sys

from test_report import START, add_node, finished, hand_ring, write

from ringflow.core.hints import ringflow_command
from ringflow.core.node_state import ExecutionResult
from ringflow.reporting.digest import Failure
from ringflow.reporting.numbers import figure
from ringflow.reporting.summary import node_happened, render_summary


def _lock(ring, **extra):
    lock = json.loads((ring / "RING.json").read_text())
    write(ring / "RING.json", {"search_hash": "0" * 64, **lock, "ring_dir": str(ring), **extra})


def test_the_decision_comes_first_with_its_interval_and_the_deploy_command(tmp_path):
    ring = hand_ring(tmp_path)
    finished(ring, "n000-base", "a", "s0", 0.5, ended_at=START + 30)
    finished(ring, "n001-good", "a", "s0", 0.7, ended_at=START + 40)
    _lock(ring, program_python="/envs/program/bin/python")
    write(ring / "selection" / "decision.json", {
        "decision": "candidate", "chosen": "n001-good", "baseline": "n000-base",
        "reason": "LCB 0.1 > margin 0: candidate replaces baseline",
        "guard": {"lcb": 0.1, "mean": 0.2, "alpha": 0.05, "margin": 0.0, "seeds": [3, 4, 5],
                  "views": ["g"]},
        "final_view": {"view": "final", "chosen": 0.71, "baseline": 0.52},
    })  # fmt: skip
    write(ring / "final" / "solution" / "MANIFEST.json",
          {"run": {"command": "python run.py --seed 0"}})  # fmt: skip
    lines = render_summary(ring).splitlines()
    assert lines[1] == (
        "final decision: candidate -> n001-good: final/ holds it; it beat the baseline n000-base"
    )
    assert lines[2].startswith(
        "  how much better: 0.2000 better on average, at least 0.1000 better with 95.0% confidence "
        "(guard: 3 fresh seeds on view(s) g"
    )
    assert lines[3] == "  on the final view final: n001-good 0.7100, baseline 0.5200"
    assert lines[4].startswith(f"  to deploy it: {ringflow_command()} export ")
    assert lines[5].endswith("RINGFLOW_SEED=0 /envs/program/bin/python run.py --seed 0")
    text = "\n".join(lines)
    assert "LCB" not in text and "Words used here:" in text
    # The table's columns are explained where they are read.
    assert "runs ok counts a node's runs whose program ended without an error" in " ".join(
        text.split()
    )


def test_a_kept_baseline_names_the_finalist_whose_guard_it_shows(tmp_path):
    ring = hand_ring(tmp_path)
    finished(ring, "n000-base", "a", "s0", 0.5, ended_at=START + 30)
    _lock(ring)
    write(ring / "selection" / "decision.json", {
        "decision": "baseline", "chosen": "n000-base", "baseline": "n000-base",
        "reason": "baseline kept", "guard_of": "n002-close",
        "guard": {"lcb": -0.01, "mean": 0.02, "alpha": 0.05, "margin": 0.0, "seeds": [3, 4],
                  "views": ["g"]},
        "verdicts": [{"node": "n001-far", "guard": {"lcb": -0.5}},
                     {"node": "n002-close", "guard": {"lcb": -0.01}},
                     {"node": "n003-last", "guard": {"lcb": -0.9}}],
    })  # fmt: skip
    lines = render_summary(ring).splitlines()
    assert lines[3].startswith(
        "  closest finalist, n002-close, against the baseline n000-base: 0.0200 better on average, "
        "at worst 0.0100 worse with 95.0% confidence (guard: 2 fresh seeds on view(s) g"
    ), lines[3]
    assert not any("how much better" in line for line in lines)


def test_a_kept_decision_gives_each_finalists_reason_once(tmp_path):
    ring = hand_ring(tmp_path)
    _lock(ring)
    why = {"n001-far": "LCB -0.5 <= margin 0: baseline kept",
           "n002-close": "LCB -0.01 <= margin 0: baseline kept"}  # fmt: skip
    write(ring / "selection" / "decision.json", {
        "decision": "baseline", "chosen": "n000-base", "baseline": "n000-base",
        "reason": "baseline kept: " + "; ".join(f"{n}: {r}" for n, r in why.items()),
        "guard_of": "n002-close",
        "guard": {"lcb": -0.01, "mean": 0.02, "alpha": 0.05, "margin": 0.0, "seeds": [3, 4],
                  "views": ["g"]},
        "passed_over": [
            {"rank": 1, "node": "n001-far", "outcome": "not_better", "reason": why["n001-far"]},
            {"rank": 2, "node": "n002-close", "outcome": "not_better",
             "reason": why["n002-close"]},
            {"rank": 3, "node": "n003-late", "outcome": "not_reached",
             "reason": "selection ended before this finalist"},
        ],
    })  # fmt: skip
    lines = render_summary(ring).splitlines()
    assert lines[2] == "  why: baseline kept; each finalist's reason is under `passed over` below"
    text = "\n".join(lines)
    for node, reason in why.items():
        assert text.count(reason) == 1  # in its passed-over line alone
        assert f"passed over: {node} (rank" in text
    # A reason that says more than the finalists' own is shown whole.
    decision = json.loads((ring / "selection" / "decision.json").read_text())
    write(ring / "selection" / "decision.json", {**decision, "reason": "guard disabled: kept"})
    assert render_summary(ring).splitlines()[2] == "  why: guard disabled: kept"


def test_the_guards_bound_reads_in_the_tasks_direction(tmp_path):
    # A lower bound below zero says how much worse the finalist may be; for a task whose
    # lower scores are better, "better" is lower and "worse" higher.
    for lcb, direction, expected in (
        (-0.01, "minimize", "at worst 0.0100 higher (worse) with"),
        (0.1, "minimize", "at least 0.1000 lower (better) with"),
        (0.1, "maximize", "at least 0.1000 better with"),
    ):
        ring = hand_ring(tmp_path / f"{direction}{lcb}")
        _lock(ring, task={"name": "toy", "direction": direction})
        write(ring / "selection" / "decision.json", {
            "decision": "baseline", "chosen": "n000-base", "baseline": "n000-base",
            "reason": "baseline kept", "guard_of": "n001-good",
            "guard": {"lcb": lcb, "mean": 0.2, "alpha": 0.05, "margin": 0.0, "seeds": [3, 4],
                      "views": ["g"]},
        })  # fmt: skip
        line = render_summary(ring).splitlines()[3]
        assert expected in line
        better = "better" if direction == "maximize" else "lower (better)"
        assert f": 0.2000 {better} on average, " in line


def test_a_guard_between_near_copies_keeps_its_significant_digits(tmp_path):
    # Two near-copies of one program differ in the seventh decimal: four decimals read
    # "+0.0000 on average, at worst 0.0000 worse".
    ring = hand_ring(tmp_path)
    _lock(ring, task={"name": "toy", "direction": "maximize"})
    write(ring / "selection" / "decision.json", {
        "decision": "baseline", "chosen": "n000-base", "baseline": "n000-base",
        "reason": "baseline kept", "guard_of": "n001-good",
        "guard": {"lcb": -8.249e-08, "mean": 3.1e-08, "alpha": 0.05, "margin": 0.0,
                  "seeds": [3, 4], "views": ["g"]},
    })  # fmt: skip
    line = render_summary(ring).splitlines()[3]
    assert "3.1e-08 better on average, at worst 8.249e-08 worse with" in line
    assert figure(0.25) == "0.2500" and figure(-0.032, sign=True) == "-0.0320"
    assert figure(0) == "0.0000" and figure(None) == "-"


def test_a_continuation_lists_every_changed_key_in_its_first_lines(tmp_path):
    ring = hand_ring(tmp_path)
    changed = {"engineer.command": {"parent": "builtin", "this": None},
               "final_top_k": {"parent": 3, "this": 2}}  # fmt: skip
    _lock(ring, chain={"continues": "r0", "parent_dir": "/runs/r0", "changed": changed})
    lines = render_summary(ring).splitlines()[:6]
    assert "continues ring r0 (/runs/r0); 2 key(s) differ from it:" in lines
    assert "  engineer.command: 'builtin' -> None" in lines
    assert "  final_top_k: 3 -> 2" in lines


def test_a_node_row_says_what_happened():
    ready = {"id": "n1", "status": "ready"}
    crash = [Failure("n1", "crash", 4, "a/s0", "boom")]
    run, cut = ExecutionResult(status="ok"), ExecutionResult(status="interrupted", budget_cut=True)
    assert node_happened(ready, [run] * 4, crash) == "crashed 4/4"
    assert node_happened(ready, [run] * 4, [Failure("n1", "invalid", 1, "a/s0", "x")]) == (
        "invalid 1/4, ok 3/4"
    )
    assert node_happened(ready, [cut, run], []) == "ok 1/2, cut 1/2"
    assert node_happened(ready, [], []) == "not run"
    # As the nodes' index has them: imported with scores this ring compares as they are;
    # or owed a rescore, not run yet; or history.
    assert node_happened({**ready, "imported": True, "rescore": False}, [], []) == "scored earlier"
    assert node_happened({**ready, "imported": True, "rescore": True}, [], []) == "not run"
    assert node_happened({"id": "n4", "status": "history", "imported": True}, [], []) == "history"
    assert node_happened({"id": "n2", "status": "rejected"}, [], []) == "rejected"
    assert node_happened({"id": "n3", "status": "carried_over"}, [], []) == "carried over"


def test_the_progress_line_counts_failures_as_the_digest_does(tmp_path):
    from test_failure_digest import _ring_with_failures

    from ringflow.reporting.digest import failure_digest
    from ringflow.reporting.progress import progress_line, snapshot

    ring = _ring_with_failures(tmp_path)
    _lock(ring)
    runs = [f for f in failure_digest(ring) if f.kind != "rejected"]
    snap = snapshot(ring)
    assert snap["failed"] == sum(f.count for f in runs) == 4  # the clock's cut is no failure
    assert snap["failed_nodes"] == len({f.node for f in runs}) == 3
    assert ", 4 failed (across 3 nodes) |" in progress_line(snap)
    assert "being scored" not in progress_line(snap)
    # A program that has ended, its job still scoring it: neither running nor done.
    done = snap["done"]
    scores = sorted(ring.glob("nodes/*/exec/*/*/score.json"))
    scores[0].unlink()
    snap = snapshot(ring)
    assert (snap["done"], snap["scoring"]) == (done - 1, 1)
    assert f"{done - 1}/{snap['total']} done, 0 running, 1 being scored" in progress_line(snap)


def test_a_stopped_ring_says_why_near_the_top(tmp_path):
    ring = hand_ring(tmp_path)
    _lock(ring)
    write(ring / "STOPPED.json", {"reason": "the task's scorer failed on the baseline's output",
                                  "cause": "task"})  # fmt: skip
    lines = render_summary(ring).splitlines()
    assert lines[2] == (
        "the ring stopped (task failure, not a candidate's): the task's scorer failed on the "
        "baseline's output"
    )
    # The command that goes on is the one the ring's own command prints, run again.
    assert lines[3].startswith("  the way on: run this ring's Snakemake command again;")
    # Once a ring continues it, that ring is the way on.
    later = ring.parent / "later"
    write(later / "RING.json", {"chain": {"parent_dir": str(ring.resolve())},
                                "config": {"task": "task-fixed"}, "created_at": 1})  # fmt: skip
    lines = render_summary(ring).splitlines()
    assert lines[3] == f"  the ring later continues this one: {ring.parent / 'later'}"


def test_a_failing_scorer_is_the_tasks_fault_in_the_digest_and_the_row(tmp_path):
    from ringflow.reporting.digest import failure_digest

    ring = hand_ring(tmp_path)
    _lock(ring)
    finished(ring, "n001-good", "a", "s0", 0.5, ended_at=START + 30)
    score = ring / "nodes/n001-good/exec/a/s0/score.json"
    write(score, {"valid": False, "evaluator_failed": "scorer", "score": None,
                  "reason": "scorer failed: can't open file 'scorer.py'"})  # fmt: skip
    [failure] = failure_digest(ring)
    assert failure.kind == "scorer failed" and "can't open file" in failure.reason
    row = next(x for x in render_summary(ring).splitlines() if x.startswith("n001-good"))
    assert "scorer failed 1/1" in row and "invalid" not in row


def test_the_deploy_hint_names_ringflow_as_the_reader_can_type_it(tmp_path, monkeypatch):
    """The summary's commands work as printed: `ringflow` on PATH, `./ringflow` in a
    checkout's root, else this environment's `ringflow` by its path."""
    env = tmp_path / "checkout" / ".venv" / "bin"
    env.mkdir(parents=True)
    own = env / "ringflow"
    own.write_text("#!/bin/sh\n")
    own.chmod(0o755)
    launcher = tmp_path / "checkout" / "ringflow"
    launcher.write_text("#!/bin/sh\n")
    launcher.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(env / "python"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert ringflow_command(tmp_path / "checkout") == "./ringflow"
    elsewhere = tmp_path / "my place"
    elsewhere.mkdir()
    assert ringflow_command(elsewhere) == shlex.quote(str(own))
    assert ringflow_command(tmp_path) == "checkout/.venv/bin/ringflow"
    monkeypatch.setenv("PATH", f"{env}:/usr/bin:/bin")  # the environment activated
    assert ringflow_command(elsewhere) == "ringflow"


def test_runs_interrupted_with_their_ring_are_neither_failures_nor_stored_weights(tmp_path):
    from test_failure_digest import _ring_with_failures

    from ringflow.reporting.progress import progress_line, snapshot

    ring = _ring_with_failures(tmp_path)
    _lock(ring)
    failed = snapshot(ring)["failed"]
    # A training run the driver's Ctrl-C stopped: it runs again when the ring does, and its
    # weights were never stored; another training run ended ok and stored its weights.
    signal = [{"event": "signal", "signal": "SIGTERM", "at": START + 90}]
    finished(ring, "n001-good", "a", "s0-ablate", None, ended_at=START + 90,
             status="interrupted", mode="train", events=signal)  # fmt: skip
    finished(ring, "n000-base", "a", "s1", 0.5, ended_at=START + 95, mode="train")
    snap = snapshot(ring)
    assert (snap["failed"], snap["interrupted"]) == (failed, 1)
    assert ", 1 interrupted (they run again when the ring does) |" in progress_line(snap)
    lines = render_summary(ring).splitlines()
    weights = next(line for line in lines if line.startswith("weights:"))
    assert "1 trained and stored" in weights, weights
    assert "1 began training and stored nothing (the run did not end ok)" in weights, weights


def test_a_ring_resumed_after_an_interruption_says_so(tmp_path):
    from ringflow.core.ledger import emit_event

    ring = hand_ring(tmp_path)
    _lock(ring)
    finished(ring, "n000-base", "a", "s0", 0.5, ended_at=START + 30)
    assert not [line for line in render_summary(ring).splitlines() if line.startswith("resumed")]
    emit_event(ring, "interrupted_rerun", executions=["n000-base/a/s0", "n000-base/b/s0"])
    emit_event(ring, "interrupted_rerun", executions=["n000-base/a/s0"])
    assert (
        "resumed: 2 times after an interruption; 3 run(s) it stopped ran again "
        "(events.jsonl: interrupted_rerun)"
    ) in render_summary(ring).splitlines()


def test_the_runs_line_says_how_many_ok_runs_have_no_valid_score(tmp_path):
    from test_failure_digest import _ring_with_failures

    ring = _ring_with_failures(tmp_path)
    _lock(ring)
    runs = next(line for line in render_summary(ring).splitlines() if line.startswith("runs:"))
    # The baseline's run the scorer failed on, and the candidate's with a bad header.
    assert runs == "runs: 2 crashed, 1 interrupted, 3 ok (2 of them without a valid score)", runs


def test_a_folder_edited_since_an_earlier_ring_names_its_two_nodes(tmp_path):
    ring = hand_ring(tmp_path)
    _lock(ring)
    add_node(ring, "n002-feat", status="ready", origin={"kind": "imported", "ring": "r1-2"})
    add_node(ring, "n004-feat", status="ready", origin={"kind": "static", "path": "c/feat"})
    index_path = ring / "nodes" / "index.json"
    index = json.loads(index_path.read_text())
    for entry in index["nodes"]:
        entry["name"] = entry["id"].split("-", 1)[1]
    write(index_path, index)
    assert (
        "n004-feat is the folder feat as it is now; n002-feat is the program it held when ring "
        "r1-2 ran it (edited since)"
    ) in render_summary(ring).splitlines()


def _lines_starting(ring, prefix: str) -> list[str]:
    return [line for line in render_summary(ring).splitlines() if line.startswith(prefix)]


def test_a_run_that_left_a_daemon_is_named(tmp_path):
    ring = hand_ring(tmp_path)
    _lock(ring)
    daemon = [{"event": "own_session", "count": 1, "processes": [{"pid": 9, "name": "x"}]}]
    finished(ring, "n001-good", "a", "s0", 0.7, ended_at=START + 40, events=daemon)
    assert _lines_starting(ring, "daemons:") == [
        "daemons: 1 run(s) started a process in a session of its own, which ringflow stopped "
        "with the run but which would outlive the program elsewhere: n001-good (a/s0)"
    ]


def test_engineer_sessions_are_counted_by_how_they_ended_and_bad_ends_named(tmp_path):
    ring = hand_ring(tmp_path)
    _lock(ring)
    for node, status in (("n003-a-g0", "ended"), ("n004-a-g1", "crash"), ("n005-a-g1", "cut"),
                         ("n006-draft-g2", "ended")):  # fmt: skip
        add_node(ring, node, status="ready", origin={"kind": "improve", "generation": 0},
                 session={"status": status, "budget_cut": status == "cut"})  # fmt: skip
    assert _lines_starting(ring, "engineer") == [
        "engineer sessions: 4 (1 crashed, 1 cut at the hand-over point, 2 finished); "
        "see their nodes' trajectory/stderr.log: n004-a-g1 crashed"
    ]
