"""`ringflow check` passes a working task, validator included, and names each mistake a
new user makes: a missing or crashing scorer, a missing validator file, a candidate that
does not compile."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import yaml

from ringflow import demo
from ringflow.precheck import check, command_files
from ringtools import VALIDATOR, make_candidate, make_task


def _with_validator(task: Path) -> Path:
    spec = yaml.safe_load((task / "task.yaml").read_text())
    spec["validator"] = "python validator.py"
    (task / "task.yaml").write_text(yaml.safe_dump(spec))
    (task / "validator.py").write_text(VALIDATOR)
    return task


def test_the_demo_task_passes_with_exit_0(tmp_path):
    task = demo.materialise_task(tmp_path / "demo" / "task")

    def check_demo(candidates: Path) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "ringflow", "check", str(task), str(candidates),
             "--baseline", str(demo.baseline_dir())],
            capture_output=True, text=True,
        )  # fmt: skip

    done = check_demo(demo.candidates_dir() / "logreg")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "check: no problem found" in done.stdout
    assert done.stdout.count("validated and scored by the task") == 2  # baseline, logreg
    # All the demo's candidates: the first of them, the crasher, runs and is named.
    done = check_demo(demo.candidates_dir())
    assert done.returncode == 1
    assert "FAIL  crash: exited with code 1" in done.stdout and "deliberate" in done.stdout


def test_a_task_with_a_working_validator_passes(tmp_path):
    task = _with_validator(make_task(tmp_path))
    report = check(task, [make_candidate(tmp_path / "cands" / "a", mean=0.6)])
    text = report.text()
    assert report.failed == 0, text
    assert "validator 'python validator.py': its files are there and compile" in text
    assert "score 0.6 (valid)" in text


def test_a_missing_scorer_file_fails_before_any_run(tmp_path):
    task = make_task(tmp_path)
    (task / "scorer.py").unlink()
    report = check(task, [make_candidate(tmp_path / "cands" / "a", mean=0.6)])
    text = report.text()
    assert f"FAIL  scorer 'python scorer.py': 'scorer.py' is not a file of {task}" in text
    assert report.failed >= 1


def test_a_missing_validator_file_and_a_scorer_syntax_error_are_named(tmp_path):
    task = _with_validator(make_task(tmp_path))
    (task / "validator.py").unlink()
    (task / "scorer.py").write_text("def broken(:\n")
    text = check(task, [], run=False).text()
    assert "FAIL  validator 'python validator.py': 'validator.py' is not a file" in text
    assert "FAIL  scorer 'python scorer.py': " in text and "does not compile" in text


def test_a_validator_that_rejects_the_candidate_output_says_whose_fault(tmp_path):
    task = _with_validator(make_task(tmp_path))
    cand = make_candidate(tmp_path / "cands" / "a", mean=3.0)  # out of [0, 1]
    text = check(task, [cand]).text()
    assert "FAIL  n001-a's output was judged invalid: value 3.0" in text
    assert "(fix the program; if its output is right, the task's scorer or validator" in text


def test_views_are_listed_by_role_and_no_validator_is_said_in_words(tmp_path):
    roles = {"search": ["proxy"], "guard": ["x3"], "final": "final"}
    task = make_task(tmp_path, roles=roles)
    text = check(task, [], run=False).text()
    assert "search proxy; guard x3; final final" in text
    assert "no validator" in text and "None" not in text


def test_command_files_reads_scripts_modules_and_helpers(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "helper.py").write_text("")
    assert command_files("python -u score.py --extra helper.py", tmp_path) == [
        ("score.py", tmp_path / "score.py"),
        ("helper.py", tmp_path / "helper.py"),
    ]
    assert command_files("python -m pkg", tmp_path) == [("pkg", tmp_path / "pkg" / "__main__.py")]
    assert command_files("./score.sh", tmp_path) == [("./score.sh", tmp_path / "score.sh")]


def test_a_broken_baseline_is_named_and_the_first_candidate_probes_instead(tmp_path):
    task = make_task(tmp_path)
    base = make_candidate(tmp_path / "base", mean=0.4)
    (base / "run.py").write_text("def f(:\n")
    report = check(task, [make_candidate(tmp_path / "cands" / "a", mean=0.6)], baseline=base)
    text = report.text()
    assert "FAIL  baseline base: " in text and "does not compile" in text
    assert "one run of n001-a on proxy" in text and "score 0.6 (valid)" in text
    assert report.failed == 1


def test_with_a_baseline_the_first_candidate_runs_too(tmp_path):
    """The baseline's run probes the scorer for the guard; the user's own candidate is
    still tried in the sandbox, so a check with --baseline says whether it runs."""
    task = make_task(tmp_path)
    base = make_candidate(tmp_path / "base", mean=0.4)
    cands = [make_candidate(tmp_path / "cands" / name, mean=0.6) for name in ("a", "b")]
    report = check(task, cands, baseline=base)
    text = report.text()
    assert report.failed == 0, text
    assert "one run of n000-base on proxy" in text and "score 0.4 (valid)" in text
    assert "one run of n001-a on proxy" in text and "score 0.6 (valid)" in text
    assert "one run of n002-b" not in text
    (cands[0] / "run.py").write_text("raise SystemExit(4)\n")
    text = check(task, cands, baseline=base).text()
    assert "one run of n001-a on proxy" in text and "FAIL  crash: exited with code 4" in text


def test_the_checks_runs_take_the_rings_configuration_file_and_print_as_they_go(tmp_path):
    task = make_task(tmp_path)
    cand = make_candidate(tmp_path / "cands" / "slow", mean=0.6)
    (cand / "run.py").write_text("import time\ntime.sleep(600)\n")
    configfile = tmp_path / "ring.yaml"
    configfile.write_text(yaml.safe_dump({"limits": {"time_limit_min": 0.05},
                                          "rings": {"one": {}}}))  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "ringflow", "check", str(task), str(cand),
         "--configfile", str(configfile)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert time.monotonic() - started < 120  # its 3 s limit, not the default 6 hours
    assert done.returncode == 1, done.stdout + done.stderr
    assert "one run of n001-slow on proxy (seed 0; time limit 0.05 min" in done.stdout
    assert "FAIL  timeout: time limit of 0.05 min reached" in done.stdout
    assert done.stdout.rstrip().endswith("check: 1 problem(s)")
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a list\n")
    done = subprocess.run([sys.executable, "-m", "ringflow", "check", str(task), str(cand),
                           "--configfile", str(bad)], capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 1 and "is not a mapping of config keys" in done.stdout


def test_a_candidate_folders_escape_sequence_never_reaches_the_terminal(tmp_path):
    task = make_task(tmp_path)
    make_candidate(tmp_path / "cands" / "we ird\x1b[31mred", mean=0.6)
    report = check(task, [tmp_path / "cands" / "we ird\x1b[31mred"], run=False)
    text = report.text()
    assert "\x1b" not in text
    assert "we ird\\x1b[31mred: python run.py" in text


def test_every_missing_view_folder_is_a_problem_of_its_own(tmp_path):
    import shutil

    task = make_task(tmp_path)
    shutil.rmtree(task / "views" / "proxy")
    shutil.rmtree(task / "views" / "final" / "labels")
    report = check(task, [], run=False)
    text = report.text()
    for missing in ("proxy/inputs", "proxy/labels", "final/labels"):
        assert f"FAIL  task {task}: views/{missing}/ not found" in text, text
    assert report.failed == 3 and text.rstrip().endswith("check: 3 problem(s)")


def test_a_scorer_that_fails_on_a_candidates_output_says_when_a_ring_stops(tmp_path):
    task = make_task(tmp_path)
    (task / "scorer.py").write_text("raise SystemExit('the scorer cannot read this')\n")
    text = check(task, [make_candidate(tmp_path / "cands" / "a", mean=0.6)]).text()
    assert "(a ring stops on this once it fails on 3 programs' outputs: fix the task)" in text
