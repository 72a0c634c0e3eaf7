"""A live engineer session past engineer.limits is stopped while it runs, as `crash`
(docs/limits.md#engineer-sessions): the supervisor counts its workspace like a program's
output, every second, and the node that session leaves is refused."""

from __future__ import annotations

import json

import pytest

from engtools import run_session_step

pytestmark = pytest.mark.sandbox

LIMITS = {"file_mb": 100, "workspace_gb": 0.001, "workspace_files": 20}
SLEEP_S = 120  # far past the test's own timeout: only the limit can end the session early
WRITES = {
    "workspace_gb": "head -c 3000000 /dev/zero > big.bin\n",
    "workspace_files": "for i in $(seq 1 40); do : > f$i; done\n",
}
REASONS = {
    "workspace_gb": "output limit exceeded",
    "workspace_files": "output file limit exceeded",
}


@pytest.mark.parametrize("limit", sorted(WRITES))
def test_a_live_session_past_its_workspace_limit_is_stopped_as_crash(tmp_path, limit):
    script = f"printf 'print(1)\\n' > run.py\n{WRITES[limit]}echo written\nsleep {SLEEP_S}\n"
    ring, node = run_session_step(tmp_path, script, "ws", limits=LIMITS)
    folder = ring / "nodes" / node
    session = json.loads((folder / "session.json").read_text())
    assert "written" in (folder / "trajectory" / "stdout.log").read_text()
    assert session["status"] == "crash", session
    assert REASONS[limit] in session["reason"], session["reason"]
    # The reason names the key the user set, not the program output's own limits.
    assert f"engineer.limits.{limit}" in session["reason"], session["reason"]
    assert "limits.output" not in session["reason"]
    assert not session["budget_cut"] and session["wall_s"] < SLEEP_S / 4, session
    assert session["reap_left"] == []
    record = json.loads((folder / "node.json").read_text())
    assert record["status"] == "rejected" and "workspace" in record["error"], record
    assert not (folder / "solution").exists()


def test_a_session_whose_write_passes_file_mb_is_told_so_by_that_key(tmp_path):
    script = ("printf 'print(1)\\n' > run.py\n"
              "python3 -c \"open('big.bin', 'wb').write(b'x' * (2 << 20))\"\n")  # fmt: skip
    limits = {**LIMITS, "file_mb": 1, "workspace_gb": 1}
    ring, node = run_session_step(tmp_path, script, "fs", limits=limits)
    session = json.loads((ring / "nodes" / node / "session.json").read_text())
    assert session["status"] == "crash", session
    assert session["reason"].startswith(
        "a write past the largest file a program may write was refused "
        "(engineer.limits.file_mb = 1, RLIMIT_FSIZE); exited with code 1"
    ), session["reason"]
