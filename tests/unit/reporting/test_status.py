"""`ringflow status`: the live text view, on rings in progress written by hand and on a copy
of the finished demo ring."""

from __future__ import annotations

import json
import subprocess
import sys

from test_report import START, add_node, copy_demo, finished, hand_ring, in_flight, write

from ringflow.reporting.report import format_time
from ringflow.reporting.status import render_status


def _line(text: str, start: str) -> str:
    found = [ln for ln in text.splitlines() if ln.strip().startswith(start)]
    assert found, f"no line starting with {start!r} in:\n{text}"
    return found[0]


def _ring_in_progress(tmp_path):
    ring = hand_ring(tmp_path)
    finished(ring, "n000-base", "a", "s0", 0.5, ended_at=START + 30)
    finished(ring, "n000-base", "b", "s0", 0.6, ended_at=START + 40)
    finished(ring, "n001-good", "a", "s0", 0.7, ended_at=START + 90)
    in_flight(ring, "n001-good", "b", "s0", started=START + 100, sample_wall=START + 160)
    return ring


def test_in_flight_execution_with_latest_health(tmp_path):
    ring = _ring_in_progress(tmp_path)
    text = render_status(ring, now=START + 165)
    assert "in flight: 1" in text
    row = _line(text, "n001-good  b")
    # node, view, variant, running for, cpu, io, rss, states, age of the health data
    assert row.split() == [
        "n001-good",
        "b",
        "s0",
        "1m05s",
        "1.75",
        "88.2",
        "3.0",
        "GiB",
        "R2",
        "S5",
        "5s",
    ]
    nodes = {
        ln.split()[0]: ln.split()
        for ln in text.splitlines()
        if ln.split()[1:2] in (["baseline"], ["candidate"])
    }
    # The baseline has both search views: its seed-0 mean is their mean. What happened
    # counts the runs that ended, in the summary's words.
    assert nodes["n000-base"] == ["n000-base", "baseline", "ok", "2/2", "0.5500", "2", "0"]
    assert nodes["n001-good"] == ["n001-good", "candidate", "ok", "1/1", "-", "1", "1"]
    assert "final decision: not made yet" in text


def test_health_line_used_before_the_first_sample_window(tmp_path):
    ring = _ring_in_progress(tmp_path)
    latest = ring / "nodes/n001-good/exec/b/s0/health/health_latest.json"
    latest.write_text(json.dumps({"started": START + 100, "state": "running", "sample": None}))
    row = _line(render_status(ring, now=START + 200), "n001-good  b")
    assert row.split()[3:] == ["1m40s", "1.50", "70.0", "2.0", "GiB", "R2", "S4", "40s"]


def test_time_to_cutoff_follows_now(tmp_path):
    ring = _ring_in_progress(tmp_path)
    cutoff = START + 1800  # moved earlier than the initial START + 2400
    early = _line(render_status(ring, now=START + 600), "cutoff")
    later = _line(render_status(ring, now=START + 1500), "cutoff")
    past = _line(render_status(ring, now=START + 1860), "cutoff")
    assert format_time(cutoff) in early
    assert "in 20m00s" in early and "in 5m00s" in later and "passed 1m00s ago" in past
    assert "(live, moved earlier 1x)" in early
    assert "in 50m00s" in _line(render_status(ring, now=START + 600), "stop_at")
    assert _line(render_status(ring, now=START), "reserve").split() == [
        "reserve",
        "12m30s",
        "(measured",
        "estimate",
        "7m00s)",
    ]


def test_cutoff_file_moves_are_read_live(tmp_path):
    ring = _ring_in_progress(tmp_path)
    assert "in 20m00s" in _line(render_status(ring, now=START + 600), "cutoff")
    state = json.loads((ring / "cutoff.json").read_text())
    state.update(cutoff=START + 1200, reserve_min=22)
    write(ring / "cutoff.json", state)
    text = render_status(ring, now=START + 600)
    assert "in 10m00s" in _line(text, "cutoff")
    assert _line(text, "reserve").split()[:2] == ["reserve", "22m00s"]


def test_without_cutoff_file_the_initial_cutoff_is_shown(tmp_path):
    ring = hand_ring(tmp_path, cutoff=None)
    text = render_status(ring, now=START + 600)
    assert "in 30m00s" in _line(text, "cutoff")
    assert "initial: cutoff.json not written" in text
    assert _line(text, "reserve").split() == ["reserve", "-"]
    assert "in flight: 0" in text


def test_rejected_node_and_refused_decision(tmp_path):
    ring = hand_ring(tmp_path)
    add_node(ring, "n002-bad", status="rejected", error="no run.py in the submission")
    write(
        ring / "selection" / "decision.json",
        {"decision": "refused", "reason": "no baseline configured", "final_written": False},
    )
    text = render_status(ring, now=START)
    assert _line(text, "n002-bad").split()[:3] == ["n002-bad", "candidate", "rejected"]
    assert "n002-bad: rejected: no run.py in the submission" in text
    assert "final decision: refused\n  no baseline configured" in text


def test_finished_demo_ring(tmp_path):
    ring = copy_demo(tmp_path)
    decision = json.loads((ring / "selection" / "decision.json").read_text())
    text = render_status(ring)
    assert f"final decision: {decision['decision']} -> {decision['chosen']}" in text
    assert f"LCB {decision['guard']['lcb']:.4f}" in text
    assert "in flight: 0" in text
    done = len(list((ring / "nodes" / decision["chosen"]).glob("exec/*/*/result.json")))
    assert _line(text, decision["chosen"]).split()[-2:] == [str(done), "0"]


def test_cli_status(tmp_path):
    ring = _ring_in_progress(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "ringflow", "status", str(ring)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "in flight: 1" in proc.stdout
    # A reader that goes away first (`| head`): no traceback, the exit of a SIGPIPE.
    import os

    read, write = os.pipe()
    os.close(read)
    with os.fdopen(write, "wb") as closed:
        argv = [sys.executable, "-m", "ringflow", "status", str(ring)]
        proc = subprocess.run(argv, stdout=closed, stderr=subprocess.PIPE, text=True, timeout=60)
    assert proc.returncode == 141 and proc.stderr == "", proc.stderr


def test_a_node_whose_runs_crashed_says_so_not_ready(tmp_path):
    ring = hand_ring(tmp_path)
    finished(ring, "n000-base", "a", "s0", 0.5, ended_at=START + 30)
    finished(ring, "n001-good", "a", "s0", None, ended_at=START + 40, status="crash")
    row = _line(render_status(ring, now=START + 60), "n001-good")
    assert row.split()[:4] == ["n001-good", "candidate", "crashed", "1/1"]
    assert "ready" not in row


def test_a_stopped_ring_says_so_not_a_live_cutoff(tmp_path):
    ring = hand_ring(tmp_path)
    finished(ring, "n000-base", "a", "s0", 0.5, ended_at=START + 30)
    write(ring / "STOPPED.json", {"reason": "the task's scorer failed on the baseline",
                                  "cause": "task"})  # fmt: skip
    text = render_status(ring, now=START + 60)
    assert "stopped  the task's scorer failed on the baseline" in text
    assert "(live" not in text and "cutoff" not in text.split("\n\n")[0]


def test_an_unfinished_ring_says_whether_a_driver_runs_it(tmp_path):
    import os

    from ringflow.ring.lease import DriverLease

    ring = _ring_in_progress(tmp_path)
    # Interrupted: its clock runs on, and nothing drives it.
    assert _line(render_status(ring, now=START + 165), "driver").strip() == (
        "driver   none: nothing runs until the ring's command is run again (it resumes)"
    )
    lease = DriverLease(ring)
    lease.acquire("snakemake ...")
    try:
        said = _line(render_status(ring, now=START + 165), "driver").strip()
        assert said.startswith("driver   running (host ") and f"PID {os.getpid()}," in said
    finally:
        lease.release()
    assert "driver   none" in render_status(ring, now=START + 165)
    # A record left by a driver killed with -9: its process is gone.
    record = json.loads((ring / ".locks" / "driver.lease").read_text())
    record.pop("released_at")
    record["pid"] = 2**22 + 12345  # no such process (above the kernel's pid_max)
    (ring / ".locks" / "driver.lease").write_text(json.dumps(record))
    assert "driver   none" in render_status(ring, now=START + 165)


def test_a_seated_incumbent_is_called_the_incumbent_and_a_seated_baseline_the_baseline(tmp_path):
    ring = _ring_in_progress(tmp_path)
    seated = {"decision": "incumbent", "chosen": "n001-good", "baseline": "n000-base"}
    write(ring / "final" / "FINAL.json", seated)
    assert "final decision: pending (incumbent n001-good seated)" in render_status(ring, now=START)
    write(ring / "final" / "FINAL.json", seated | {"decision": "baseline", "chosen": "n000-base"})
    assert "final decision: pending (baseline n000-base seated)" in render_status(ring, now=START)


def test_the_reserve_reads_as_a_duration(tmp_path):
    ring = _ring_in_progress(tmp_path)
    state = json.loads((ring / "cutoff.json").read_text())
    write(ring / "cutoff.json", {**state, "reserve_min": 4.26908})
    assert _line(render_status(ring, now=START), "reserve").split()[:2] == ["reserve", "4m16s"]
