"""Tests clean up after themselves (issue: `make test` left 27 MB in /tmp)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_temporary_folders_lie_under_the_session_folder(tmp_path):
    assert tmp_path.is_relative_to(os.environ["RINGFLOW_TEST_TMP"])


def test_a_test_session_leaves_nothing_in_its_temporary_folder(tmp_path):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "RINGFLOW_TEST_TMP"}
    env["TMPDIR"] = str(scratch)
    # Tests that write with tmp_path and through ringflow's own writers (a locked ring).
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/unit/ring/test_locked_edits.py::test_an_untouched_ring_has_no_edits",
         "tests/unit/contracts/test_import_checks.py::test_a_syntax_error_is_rejected_at_import_with_the_line"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert list(scratch.iterdir()) == []
