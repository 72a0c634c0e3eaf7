"""How an engineer session's node is settled (docs/contracts.md#engineer): a program of its
own runs, however the session ended; one that runs already is not run again, and a session
that failed says how, with the last line of its stderr."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from engtools import planned_session, run_session_step

pytestmark = pytest.mark.sandbox


def settled(tmp_path, script: str) -> dict:
    template = str(tmp_path / "cands" / "a")  # the workspace starts as candidate a's copy
    ring, node = run_session_step(tmp_path, script, "st", template=template)
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


SLOW_THEN_WRITE = """\
if [ -e {flag} ]; then echo thinking; sleep 120; fi
printf '\\n# tuned\\n' >> run.py
"""


def test_a_session_stopped_with_its_ring_leaves_its_node_to_run_again(tmp_path):
    flag = tmp_path / "tools" / "slow"
    ring, node, argv = planned_session(tmp_path, SLOW_THEN_WRITE.format(flag=flag), "si",
                                       template=str(tmp_path / "cands" / "a"))  # fmt: skip
    flag.write_text("")
    step = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = ring / "nodes" / node / "trajectory" / "stdout.log"
    end = time.monotonic() + 60
    while not (log.exists() and "thinking" in log.read_text()):
        assert step.poll() is None and time.monotonic() < end, step.communicate()
        time.sleep(0.1)
    step.send_signal(signal.SIGINT)  # as a terminal's Ctrl-C reaches it
    _, err = step.communicate(timeout=60)
    assert step.returncode == 2, err
    assert f"the engineer session of {node} was stopped with its ring" in err
    assert "it runs again, from the start, when the ring does" in err
    record = json.loads((ring / "nodes" / node / "node.json").read_text())
    assert (
        record["status"] == "engineering" and not (ring / "nodes" / node / "session.json").exists()
    )
    # Run again, the session starts over and its node is settled.
    flag.unlink()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((ring / "nodes" / node / "node.json").read_text())["status"] == "ready"
