"""Interrupts (issue: SIGINT to Snakemake let in-flight executions finish, then ran them
again; an execution stopped by a signal that reached only it was never retried and dropped
its node out of promotion)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from ringflow.core.interrupts import stopped_by_signal
from ringflow.reporting.status import render_status
from ringflow.verify import verify_ring
from ringflow.workflow.relay import command_words, is_supervisor
from ringtools import (
    gated_ring,
    locked_ring,
    make_candidate,
    snakemake,
    start_snakemake,
    wrap_bwrap,
)

pytestmark = [pytest.mark.e2e, pytest.mark.user]

# Seed 0 on proxy (not the ablation) sleeps until GATE, an epoch fixed at creation; every
# other execution is quick.
SLOW = """\
import argparse, json, os, time
p = argparse.ArgumentParser()
p.add_argument("--seed", type=int, default=0)
p.add_argument("--ablate", action="store_true")
a = p.parse_args()
data = open(os.path.join(os.environ["RINGFLOW_INPUT_DIR"], "data.txt")).read().strip()
if data == "data of proxy" and not a.ablate:
    while time.time() < GATE:
        time.sleep(0.2)
with open(os.path.join(os.environ["RINGFLOW_OUTPUT_DIR"], "score.json"), "w") as f:
    json.dump({"value": 0.6}, f)
"""
GATE_AFTER_S = 100


def _events(ring: Path) -> list[dict]:
    path = ring / "events.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _wait_in_flight(ring: Path, node: str, after: float, timeout: float = 120) -> Path:
    exec_dir = ring / "nodes" / node / "exec" / "proxy" / "s0"
    end = time.time() + timeout
    while time.time() < end:
        latest = exec_dir / "health" / "health_latest.json"
        if (
            latest.exists()
            and latest.stat().st_mtime > after
            and not (exec_dir / "result.json").exists()
        ):
            return exec_dir
        time.sleep(0.2)
    raise AssertionError(f"{exec_dir} never ran")


def _supervisors(workdir: Path) -> list[psutil.Process]:
    """The `ringflow step execute` processes of rings under workdir (named relatively)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "cwd"]):
        if is_supervisor(proc.info["cmdline"] or []) and proc.info["cwd"] == str(workdir):
            found.append(proc)
    return found


def _supervisor_of(workdir: Path, node: str) -> psutil.Process:
    for proc in _supervisors(workdir):
        words = command_words(proc.info["cmdline"])
        if node in words and "proxy" in words:
            return proc
    raise AssertionError("no supervisor found")


def _interrupted(ring: Path, node: str) -> list[dict]:
    return [e for e in _events(ring) if e["kind"] == "execution_finished"
            and e["node"] == node and e["view"] == "proxy" and e["variant"] == "s0"
            and e["status"] == "interrupted" and not e["budget_cut"]]  # fmt: skip


@pytest.fixture
def drivers():
    """Background Snakemake processes of a test: killed with their session if left running."""
    started: list = []
    yield started
    for driver in started:
        if driver.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()


def _slow_run_in_flight(tmp_path, drivers, gate_after_s: float = GATE_AFTER_S):
    """(config, ring, node, driver, exec dir, start) of a gated ring whose slow run is in
    flight under a driver started now."""
    config, ring = gated_ring(tmp_path, SLOW, gate_after_s)
    node = "n001-slow"
    start = time.time()
    driver = start_snakemake(tmp_path, config)
    drivers.append(driver)
    return config, ring, node, driver, _wait_in_flight(ring, node, start), start


def test_interrupted_executions_stop_promptly_and_run_again(tmp_path, drivers):
    # 1. A signal that reaches only the execution's supervisor: the ring goes on without
    #    it, ends incomplete, and the execution is not left as if it had finished.
    config, ring, node, driver, exec_dir, start = _slow_run_in_flight(tmp_path, drivers)
    _supervisor_of(tmp_path, node).send_signal(signal.SIGTERM)
    assert driver.wait(timeout=180) != 0
    assert len(_interrupted(ring, node)) == 1
    assert not (exec_dir / "result.json").exists()
    assert (ring / "nodes" / node / "exec" / "x3" / "s0" / "result.json").exists()

    # 2. Run again: the execution runs again. SIGINT to Snakemake alone stops it promptly.
    again = time.time()
    driver = start_snakemake(tmp_path, config)
    drivers.append(driver)
    _wait_in_flight(ring, node, again)
    sent = time.time()
    driver.send_signal(signal.SIGINT)
    driver.wait(timeout=60)
    assert time.time() - sent < 30, "SIGINT waited for the execution to finish"
    assert time.time() < start + GATE_AFTER_S, "the program finished by itself: too slow a run"
    assert len(_interrupted(ring, node)) == 2
    assert any(e["kind"] == "interrupt_relayed" for e in _events(ring))
    stopped = json.loads((exec_dir / "result.json").read_text())
    assert stopped["reason"].startswith("its ring was stopped (SIGINT to the driver); "), stopped
    assert _supervisors(tmp_path) == []

    # 3. Run again: it runs a third time, finishes, and the ring completes with its score.
    time.sleep(max(0.0, start + GATE_AFTER_S - time.time()))
    done = snakemake(tmp_path, config)
    result = json.loads((exec_dir / "result.json").read_text())
    # What the resumed ring did with the interrupted run, should it not run it again.
    assert result["status"] == "ok", (result, _events(ring), done.stderr[-3000:])
    promotion = json.loads((ring / "selection" / "promotion.json").read_text())
    assert promotion["promoted"] == [node]


def test_sigterm_to_the_driver_leaves_the_interrupted_run_recorded_and_the_ring_verified(
    tmp_path, drivers
):
    gate_after_s = 40  # the resumed run waits for it: shorter than the others'
    config, ring, node, driver, exec_dir, start = _slow_run_in_flight(
        tmp_path, drivers, gate_after_s
    )
    sent = time.time()
    driver.send_signal(signal.SIGTERM)  # as `kill` or a scheduler stops it
    assert driver.wait(timeout=60) != 0
    assert time.time() - sent < 30, "SIGTERM waited for the execution to finish"
    assert time.time() < start + gate_after_s, "the program finished by itself: too slow a run"
    assert _supervisors(tmp_path) == []

    # Until the ring runs again, its records say what happened: the run was interrupted
    # (Snakemake removes a failed job's outputs; this one's were hashed into the ledger).
    result = json.loads((exec_dir / "result.json").read_text())
    assert result["status"] == "interrupted" and not result["budget_cut"]
    # Told by the relay's SIGTERM, stopped because the ring was: the reason says both.
    assert result["reason"].startswith("its ring was stopped (SIGTERM to the driver); "), result
    assert json.loads((exec_dir / "score.json").read_text())["valid"] is False
    assert verify_ring(ring) == []
    assert "in flight: 0" in render_status(ring)

    # Run again: the interrupted run runs again and the ring completes with its score.
    time.sleep(max(0.0, start + gate_after_s - time.time()))
    snakemake(tmp_path, config)
    assert json.loads((exec_dir / "result.json").read_text())["status"] == "ok"
    promotion = json.loads((ring / "selection" / "promotion.json").read_text())
    assert promotion["promoted"] == [node]
    assert verify_ring(ring) == []
    # The record was set aside; the summary still says the ring was interrupted.
    summary = (ring / "summary.txt").read_text()
    assert "resumed: 1 time after an interruption; " in summary, summary


def test_only_a_signal_that_was_not_a_budget_cut_asks_for_a_rerun():
    signal_event = {"event": "signal", "signal": "SIGTERM"}
    assert stopped_by_signal({"status": "interrupted", "budget_cut": False,
                              "events": [signal_event]})  # fmt: skip
    assert stopped_by_signal({"status": "interrupted", "budget_cut": False,
                              "events": [{"event": "orphaned"}]})  # fmt: skip
    assert not stopped_by_signal({"status": "interrupted", "budget_cut": True,
                                  "events": [signal_event]})  # fmt: skip
    # A failed replay check is interrupted too, but running it again would not help.
    assert not stopped_by_signal({"status": "interrupted", "budget_cut": False, "events": []})
    assert not stopped_by_signal({"status": "crash", "budget_cut": False,
                                  "events": [signal_event]})  # fmt: skip


# A bubblewrap slow to set up the program (its probes stay quick): the sandbox has not
# started the program when the signal comes.
SLOW_WHILE_FLAGGED = 'if [ -e {flag} ]; then case "$*" in *--seed*) sleep 60;; esac; fi'


def _setting_up_the_program(pid: int) -> bool:
    """The slow bubblewrap runs for the program itself (not a probe before it)."""
    with contextlib.suppress(psutil.Error):
        tree = psutil.Process(pid).children(recursive=True)
        return any(p.name() == "sleep" for p in tree) and any("--seed" in p.cmdline() for p in tree)
    return False


def test_a_signal_before_the_sandbox_started_the_program_is_an_interruption(tmp_path, monkeypatch):
    # On PATH before the lock (the environment is frozen there); slow once the flag exists.
    flag = tmp_path / "slow-sandbox"
    wrap_bwrap(tmp_path, monkeypatch, SLOW_WHILE_FLAGGED.format(flag=flag))
    make_candidate(tmp_path / "cands" / "a", mean=0.5)
    ring = locked_ring(tmp_path, tmp_path / "cands", "early")
    flag.touch()
    step = subprocess.Popen(
        [sys.executable, "-m", "ringflow", "step", "execute", str(ring), "n001-a", "proxy", "s0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    end = time.time() + 60
    while not _setting_up_the_program(step.pid):
        assert time.time() < end and step.poll() is None, step.communicate()
        time.sleep(0.1)
    step.send_signal(signal.SIGTERM)
    _, stderr = step.communicate(timeout=60)
    finished = [e for e in _events(ring) if e["kind"] == "execution_finished"]
    assert [e["status"] for e in finished] == ["interrupted"], (step.returncode, stderr[-2000:])
    # Not a machine failure: the ring is not stopped, and nothing blames the sandbox.
    assert not (ring / "STOPPED.json").exists()
    assert "did not start" not in stderr


def _wait_recorded(result: Path, timeout: float = 60) -> dict:
    end = time.time() + timeout
    while time.time() < end:
        with contextlib.suppress(OSError, ValueError):
            return json.loads(result.read_text())
        time.sleep(0.2)
    raise AssertionError(f"{result} was never written")


def test_a_killed_drivers_lock_leaves_the_ring_as_it_was_until_unlocked(tmp_path, drivers):
    # After a kill -9 Snakemake's lock stays. The same command must be refused by it
    # before anything of the ring changes: the interrupted execution's record is set aside
    # only by the run that goes on (docs/recovery.md).
    from ringflow.verify import verify_ring

    config, ring = gated_ring(tmp_path, SLOW, GATE_AFTER_S)
    node = "n001-slow"
    driver = start_snakemake(tmp_path, config)
    drivers.append(driver)
    exec_dir = _wait_in_flight(ring, node, time.time() - 1)
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait(timeout=60)
    record = _wait_recorded(exec_dir / "result.json")
    assert stopped_by_signal(record), record
    assert list((tmp_path / ".snakemake" / "locks").iterdir())

    refused = snakemake(tmp_path, config, check=False)
    assert refused.returncode != 0
    assert "--unlock" in refused.stdout + refused.stderr
    assert json.loads((exec_dir / "result.json").read_text()) == record
    assert not any(e["kind"] == "interrupted_rerun" for e in _events(ring))
    assert verify_ring(ring) == []

    # Unlocked, the same command sets the record aside and runs the execution again.
    snakemake(tmp_path, config, "--unlock")
    driver = start_snakemake(tmp_path, config)
    drivers.append(driver)
    _wait_in_flight(ring, node, time.time() - 1)
    assert any(e["kind"] == "interrupted_rerun" for e in _events(ring))
    driver.send_signal(signal.SIGINT)  # stopped as a user stops it: the run is recorded
    driver.wait(timeout=60)
    assert len(_interrupted(ring, node)) == 2
