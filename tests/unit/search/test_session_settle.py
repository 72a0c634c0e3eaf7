"""How an engineer session's node is settled (docs/contracts.md#engineer): a program of its
own runs, however the session ended; one that runs already is not run again, and a session
that failed says how, with the last line of its stderr."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from engtools import engineer_config, search_config
from ringflow.search.plan import plan_generation
from ringtools import locked_ring, make_candidate

pytestmark = pytest.mark.sandbox


def settled(tmp_path, script: str) -> dict:
    make_candidate(tmp_path / "cands" / "a", mean=0.5)
    engineer = engineer_config(tmp_path / "tools", script, env_pass=[],
                               template=str(tmp_path / "cands" / "a"))  # fmt: skip
    ring = locked_ring(tmp_path, tmp_path / "cands", "st", engineer=engineer,
                       search=search_config())  # fmt: skip
    (node,) = plan_generation(ring, 0)["nodes"]
    argv = [sys.executable, "-m", "ringflow", "step", "engineer", str(ring), node]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((ring / "nodes" / node / "node.json").read_text())


def test_a_session_that_fails_before_changing_anything_is_not_run_and_says_why(tmp_path):
    # The workspace starts as a copy of the template, candidate a's program.
    record = settled(tmp_path, "echo 'Traceback: boom' >&2\nexit 3\n")
    assert record["status"] == "rejected"
    assert record["error"] == (
        "the engineer session crashed (exited with code 3; its stderr ends: Traceback: boom) "
        "and wrote the program of n001-a, which runs already"
    )
    assert not (tmp_path / "runs" / "st" / "nodes" / record["id"] / "solution").exists()


def test_a_program_of_its_own_runs_though_its_session_crashed(tmp_path):
    record = settled(tmp_path, "printf '\\n# tuned\\n' >> run.py\nexit 3\n")
    assert record["status"] == "ready", record
    assert record["session"]["status"] == "crash" and record["session"]["exit_code"] == 3
