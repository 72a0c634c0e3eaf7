"""Every way a ring ends early prints the command that continues the work, and that
command, typed as printed, finishes it (docs/recovery.md)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from ringflow.verify import verify_ring
from ringtools import (
    SCORER,
    full_config,
    locked_ring,
    make_candidate,
    make_task,
    snakemake,
    snakemake_argv,
    wrap_bwrap,
    write_config,
)

pytestmark = pytest.mark.e2e

GUARD_OFF = {"enabled": False, "seeds": 5, "alpha": 0.05, "margin": 0.0}


def printed_command(stderr: str) -> str:
    """The command of the last advice: an indented line after a line ending in "run:"."""
    lines = stderr.splitlines()
    found = [
        lines[i + 1][4:]
        for i in range(len(lines) - 1)
        if lines[i].rstrip().endswith("run:") and lines[i + 1].startswith("    ")
    ]
    assert found, f"no command printed:\n{stderr[-3000:]}"
    return found[-1]


def follow(command: str, cwd: Path | None = None, env: dict | None = None):
    """Run the printed command as a user pastes it into a shell."""
    return subprocess.run(["bash", "-c", command], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=900)  # fmt: skip


def finished(ring: Path) -> dict:
    assert (ring / "stop_manifest.json").exists(), f"{ring} did not finish"
    return json.loads((ring / "final" / "FINAL.json").read_text())


def test_a_scorer_failure_continues_in_the_printed_new_ring(tmp_path):
    task = make_task(tmp_path)
    (task / "scorer.py").write_text("raise SystemExit('the scorer is broken')\n")
    make_candidate(tmp_path / "cands" / "a", mean=0.6, weights=True)
    base = make_candidate(tmp_path / "base", mean=0.4)
    config = write_config(tmp_path, ring_id="sc", task=str(task), candidates=str(tmp_path /
                          "cands"), baseline=str(base), guard=GUARD_OFF)  # fmt: skip
    done = snakemake(tmp_path, config, check=False)
    assert done.returncode != 0
    stopped = json.loads((tmp_path / "runs" / "sc" / "STOPPED.json").read_text())
    assert stopped["cause"] == "task"
    # What ringflow says at the end opens with the cause, once, not Snakemake's RuleException
    # nor a later job's refusal to run in the stopped ring.
    said = done.stderr.splitlines()
    heads = [i for i, line in enumerate(said) if line.startswith("ringflow: the ring runs/sc")]
    assert heads, done.stderr[-3000:]
    at = heads[-1]
    assert said[at].startswith("ringflow: the ring runs/sc stopped: the task's scorer failed on "
                               "the baseline's output"), said[at]  # fmt: skip
    assert "the scorer is broken" in said[at], said[at]
    assert not [line for line in said[at - 1 :] if line.startswith("ringflow: the error: ")]
    assert not [line for line in said[at:] if "RuleException" in line or "Traceback" in line]
    command = printed_command(done.stderr)
    assert "continue_from=runs/sc" in command and "ring_id=sc-2" in command
    # The same command again is refused before any job runs, with the same way on, once.
    logs = sorted((tmp_path / "runs" / "sc" / "logs").rglob("*"))
    same = snakemake(tmp_path, config, check=False)
    assert same.returncode != 0
    assert printed_command(same.stderr) == command
    assert same.stderr.count("ringflow: the ring runs/sc stopped: ") == 1, same.stderr[-3000:]
    assert "Exception" not in same.stderr and "Traceback" not in same.stderr
    assert sorted((tmp_path / "runs" / "sc" / "logs").rglob("*")) == logs
    # The fix goes into a copy of the task, made by the printed line.
    copy_line = next(line.strip() for line in said if line.strip().startswith("cp -r "))
    assert follow(copy_line, cwd=tmp_path).returncode == 0
    fixed = Path(f"{task}-fixed")
    assert f"task={fixed}" in command
    (fixed / "scorer.py").write_text(SCORER)  # the fix
    again = follow(command)
    assert again.returncode == 0, again.stderr[-4000:]
    final = finished(tmp_path / "runs" / "sc-2")
    assert final["decision"]
    ring = json.loads((tmp_path / "runs" / "sc-2" / "RING.json").read_text())
    assert ring["chain"]["continues"] == "sc"
    # The stopped ring keeps the task it ran with: it still verifies.
    assert verify_ring(tmp_path / "runs" / "sc") == []
    # Its own command now points to the ring that continues it, not to a third one.
    later = snakemake(tmp_path, config, check=False)
    assert later.returncode != 0
    assert "The ring sc-2 continues this one already" in later.stderr, later.stderr[-3000:]
    assert printed_command(later.stderr).endswith(
        f"ring_id=sc-2 continue_from=runs/sc task={fixed}"
    )
    # A finished ring runs as nothing, even after its task is edited; a note says so.
    with open(fixed / "scorer.py", "a") as scorer:
        scorer.write("# edited after the ring finished\n")
    rerun = follow(command)
    said = rerun.stdout + rerun.stderr
    assert rerun.returncode == 0 and "Nothing to be done" in said, said[-3000:]
    assert said.count("ringflow: note: the ring runs/sc-2 has finished") == 1, said[-3000:]
    assert "ring_id=sc-3 continue_from=runs/sc-2" in printed_command(rerun.stderr)


def test_the_same_command_after_a_fixed_scorer_names_the_continuation(tmp_path):
    """The old advice (fix, delete STOPPED.json, run again) is refused by the locked ring;
    the refusal itself prints the command that works."""
    task = make_task(tmp_path)
    (task / "scorer.py").write_text("raise SystemExit('the scorer is broken')\n")
    make_candidate(tmp_path / "cands" / "a", mean=0.6)
    base = make_candidate(tmp_path / "base", mean=0.4)
    config = write_config(tmp_path, ring_id="ed", task=str(task), candidates=str(tmp_path /
                          "cands"), baseline=str(base), guard=GUARD_OFF)  # fmt: skip
    assert snakemake(tmp_path, config, check=False).returncode != 0
    (task / "scorer.py").write_text(SCORER)
    (tmp_path / "runs" / "ed" / "STOPPED.json").unlink()
    refused = snakemake(tmp_path, config, check=False)
    assert refused.returncode != 0
    assert refused.stderr.count("ringflow: error: ring ") == 1, refused.stderr[-3000:]
    assert "Exception" not in refused.stderr and "Traceback" not in refused.stderr
    command = printed_command(refused.stderr)
    assert "continue_from=runs/ed" in command
    again = follow(command)
    assert again.returncode == 0, again.stderr[-4000:]
    finished(tmp_path / "runs" / "ed-2")


BROKEN_WHILE_FLAGGED = (
    "if [ -e {flag} ]; then echo 'bwrap: No permissions to create new namespace' >&2; exit 1; fi"
)


def test_a_sandbox_failure_continues_the_same_ring_once_fixed(tmp_path, monkeypatch):
    # A bwrap that works until the flag file exists (PATH, part of the environment, stays).
    flag = tmp_path / "sandbox-broken"
    wrap_bwrap(tmp_path, monkeypatch, BROKEN_WHILE_FLAGGED.format(flag=flag))
    cands = tmp_path / "cands"
    make_candidate(cands / "a", mean=0.5)
    ring = locked_ring(tmp_path, cands, "sb", guard=GUARD_OFF)
    config = tmp_path / "sb.yaml"
    config.write_text(yaml.safe_dump(full_config(
        ring_id="sb", task=str(tmp_path / "task"), candidates=str(cands), baseline=None,
        guard=GUARD_OFF)))  # fmt: skip
    flag.touch()
    done = snakemake(tmp_path, config, check=False)
    assert done.returncode != 0, done.stderr[-3000:]
    assert json.loads((ring / "STOPPED.json").read_text())["cause"] == "machine"
    command = printed_command(done.stderr)
    assert command.startswith(f"rm {ring / 'STOPPED.json'} && ")
    flag.unlink()  # the machine is fixed
    again = follow(command)
    assert again.returncode == 0, again.stderr[-4000:]
    finished(ring)


def test_a_changed_environment_continues_in_the_printed_new_ring(tmp_path):
    venv = tmp_path / "program-env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    cands = tmp_path / "cands"
    make_candidate(cands / "a", mean=0.5)
    overrides = {"program": {"python": str(venv / "bin" / "python")}, "guard": GUARD_OFF}
    ring = locked_ring(tmp_path, cands, "en", **overrides)
    site = next(venv.glob("lib/python*/site-packages"))
    dist = site / "extra_lib-1.0.dist-info"  # a library installed after the lock
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: extra-lib\nVersion: 1.0\n")
    (site / "extra_lib.py").write_text("VALUE = 1\n")
    config = tmp_path / "en.yaml"
    config.write_text(yaml.safe_dump(full_config(
        ring_id="en", task=str(tmp_path / "task"), candidates=str(cands), baseline=None,
        **overrides)))  # fmt: skip
    done = snakemake(tmp_path, config, check=False)
    assert done.returncode != 0
    assert json.loads((ring / "STOPPED.json").read_text())["cause"] == "environment"
    command = printed_command(done.stderr)
    assert "continue_from=runs/en" in command
    again = follow(command)
    assert again.returncode == 0, again.stderr[-4000:]
    finished(tmp_path / "runs" / "en-2")


SLOW = """\
import json, os, time
while not os.path.exists(GATE):
    time.sleep(0.2)
with open(os.path.join(os.environ["RINGFLOW_OUTPUT_DIR"], "score.json"), "w") as f:
    json.dump({"value": 0.6}, f)
"""


def test_ctrl_c_prints_the_same_command_and_it_finishes_the_ring(tmp_path):
    make_task(tmp_path)
    gate = tmp_path / "gate"
    slow = make_candidate(tmp_path / "cands" / "slow", mean=0.6)
    (slow / "run.py").write_text(f"GATE = {str(gate)!r}\n" + SLOW)
    unconfined = {**full_config()["sandbox"], "mode": "none"}  # the program sees the gate
    config = write_config(tmp_path, ring_id="cc", task=str(tmp_path / "task"),
                          candidates=str(tmp_path / "cands"), baseline=None,
                          guard=GUARD_OFF, sandbox=unconfined)  # fmt: skip
    driver = subprocess.Popen(snakemake_argv(tmp_path, config), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              start_new_session=True)  # fmt: skip
    try:
        ring = tmp_path / "runs" / "cc"
        end = time.time() + 300
        while not list(ring.glob("nodes/*/exec/*/*/health/health_latest.json")):
            assert time.time() < end and driver.poll() is None, "no execution started"
            time.sleep(0.3)
        driver.send_signal(signal.SIGINT)
        _, stderr = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
    assert driver.returncode != 0
    command = printed_command(stderr)
    assert shlex.split(command)[1:] == snakemake_argv(tmp_path, config)[1:]
    gate.touch()
    again = follow(command)
    assert again.returncode == 0, again.stderr[-4000:]
    finished(ring)
