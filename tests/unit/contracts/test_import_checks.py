"""Import checks what it can (issue: a candidate with a syntax error was imported `ready`
and crashed four times), and `ringflow check` finds it before a ring is spent."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ringflow.candidate import load_solution
from ringflow.core.clock import load_ring
from ringflow.core.errors import CandidateError
from ringflow.core.jsonio import read_json
from ringflow.core.layout import RingLayout
from ringflow.core.records import record_problems
from ringflow.nodes import import_static
from ringflow.precheck import check
from ringtools import locked_ring, make_candidate, make_task

LIMIT = 1024**3


def test_a_syntax_error_is_rejected_at_import_with_the_line(tmp_path):
    cand = make_candidate(tmp_path / "broken", mean=0.5)
    (cand / "run.py").write_text("import sys\nprint('unclosed'\n")
    with pytest.raises(CandidateError, match=r"run\.py: does not compile: .*\(line 2\)"):
        load_solution(cand, LIMIT)


def test_a_command_naming_a_missing_script_is_rejected(tmp_path):
    cand = make_candidate(tmp_path / "elsewhere", mean=0.5)
    (cand / "EXECUTION.json").write_text('{"command": ["python", "train.py"]}')
    with pytest.raises(CandidateError, match=r"names train\.py, which is not in the solution"):
        load_solution(cand, LIMIT)
    (cand / "EXECUTION.json").write_text('{"command": ["python", "../up.py"]}')
    with pytest.raises(CandidateError, match="outside the solution"):
        load_solution(cand, LIMIT)


def test_a_compiling_candidate_and_a_non_python_program_pass(tmp_path):
    assert load_solution(make_candidate(tmp_path / "fine", mean=0.5), LIMIT).command
    shell = make_candidate(tmp_path / "shell", mean=0.5)
    (shell / "EXECUTION.json").write_text('{"command": ["./run.sh"]}')
    (shell / "run.sh").write_text("#!/bin/sh\nexit 0\n")
    with pytest.raises(CandidateError, match="not executable"):
        load_solution(shell, LIMIT)
    (shell / "run.sh").chmod(0o755)
    assert load_solution(shell, LIMIT).command == ("./run.sh",)


def test_check_runs_the_checks_the_scorer_and_one_candidate(tmp_path):
    task = make_task(tmp_path)
    cands = tmp_path / "cands"
    make_candidate(cands / "a-good", mean=0.75)
    broken = make_candidate(cands / "b-broken", mean=0.5)
    (broken / "run.py").write_text("def f(:\n")
    report = check(task, [cands])
    text = report.text()
    assert "ok    a-good: python run.py" in text
    assert "FAIL  b-broken:" in text and "does not compile" in text
    assert "one run of n001-a-good on proxy" in text and "score 0.75 (valid)" in text
    assert report.failed == 1


def test_check_finds_a_crashing_scorer_and_a_crashing_candidate(tmp_path):
    task = make_task(tmp_path)
    (task / "scorer.py").write_text("raise SystemExit('scorer: labels unreadable')\n")
    cand = make_candidate(tmp_path / "cands" / "fine", mean=0.5)
    text = check(task, [cand]).text()
    assert "FAIL  the task's scorer failed: scorer: labels unreadable" in text
    crashy = make_candidate(tmp_path / "cands2" / "crashy", mean=0.5, crash_seeds=[0])
    text = check(make_task(tmp_path / "t2"), [crashy]).text()
    assert "FAIL  crash: exited with code 1; stderr: crashing on purpose for seed 0" in text


def test_check_command_exit_code_and_clean_up(tmp_path):
    task = make_task(tmp_path)
    good = make_candidate(tmp_path / "cands" / "good", mean=0.5)
    done = subprocess.run(
        [sys.executable, "-m", "ringflow", "check", str(task), str(good)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "check: no problem found" in done.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "ringflow", "check", str(tmp_path / "no-such-task")],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 1 and "task.yaml not found" in bad.stdout


@pytest.mark.user
def test_an_import_cut_before_its_index_runs_again_whole(tmp_path):
    # The import's records are synced at its end, before the index that marks it done
    # (docs/ring-folder.md#durability): cut before the index, it runs again from the start,
    # over the read-only copies it made the first time.
    cands = tmp_path / "cands"
    for name in ("a", "b"):
        make_candidate(cands / name, mean=0.5)
    ring_dir = locked_ring(tmp_path, cands, "r")
    layout = RingLayout(ring_dir)
    first = read_json(layout.nodes_index)
    layout.nodes_index.unlink()
    layout.nodes_static.unlink()
    (layout.submission("n001-a") / "left-by-the-cut.txt").write_text("x")

    again = import_static(load_ring(ring_dir))
    assert again == first
    assert not (layout.submission("n001-a") / "left-by-the-cut.txt").exists()
    assert not os.access(layout.submission("n001-a") / "run.py", os.W_OK) or os.geteuid() == 0
    assert record_problems(ring_dir) == []
