"""One driver per ring: the driver lease (held, refused with its holder, stale taken over)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from ringflow.ring import lease as lease_module
from ringflow.ring.lease import DriverLease, LeaseHeld, hold_leases, lease_path, release_leases

HOLD = """\
import sys, time
from ringflow.ring.lease import DriverLease
DriverLease(sys.argv[1]).acquire("holder")
print("held", flush=True)
time.sleep(600)
"""


@pytest.fixture
def holder():
    """A process of its own that holds a ring's lease until the test kills it."""
    started = []

    def start(ring_dir) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", HOLD, str(ring_dir)],
                                stdout=subprocess.PIPE, text=True)  # fmt: skip
        assert proc.stdout.readline().strip() == "held"
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_a_second_driver_is_refused_with_the_holder_named(tmp_path, holder):
    ring = tmp_path / "runs" / "r1"
    first = holder(ring)
    with pytest.raises(LeaseHeld) as refused:
        DriverLease(ring).acquire()
    said = str(refused.value)
    assert f"PID {first.pid}" in said and f"host {socket.gethostname()}" in said
    assert "since 20" in said and "--unlock does not lift" in said
    record = json.loads(lease_path(ring).read_text())
    assert record["pid"] == first.pid, "a refused driver must not overwrite the record"


def test_a_stale_lease_is_taken_over_with_a_line_saying_so(tmp_path, holder):
    ring = tmp_path / "runs" / "r1"
    first = holder(ring)
    first.send_signal(signal.SIGKILL)  # no chance to release: the record stays
    first.wait()
    mine = DriverLease(ring)
    note = mine.acquire()
    assert note is not None and "took over" in note and f"PID {first.pid}" in note
    assert json.loads(lease_path(ring).read_text())["pid"] == os.getpid()
    mine.release()
    assert json.loads(lease_path(ring).read_text())["released_at"] > 0
    again = DriverLease(ring)
    assert again.acquire() is None, "a released lease is not stale"
    again.release()


def test_the_lease_is_not_inherited_by_a_program_the_driver_starts(tmp_path):
    ring = tmp_path / "runs" / "r1"
    mine = DriverLease(ring)
    mine.acquire()
    try:
        # A job's process (started by the driver) neither holds nor needs the lease: it
        # ends at once, and afterwards the lease is still the driver's alone.
        fds = "import os, sys; print(sys.argv[1] in os.popen('ls -l /proc/%d/fd' % os.getpid())"
        fds += ".read())"
        child = subprocess.run([sys.executable, "-c", fds, str(lease_path(ring))],
                               capture_output=True, text=True, check=True, timeout=60,
                               close_fds=False)  # fmt: skip
        assert child.stdout.strip() == "False"
        with pytest.raises(LeaseHeld):
            DriverLease(ring).acquire()
    finally:
        mine.release()


def test_an_invocation_takes_every_ring_or_none(tmp_path, holder):
    free, held = tmp_path / "runs" / "a", tmp_path / "runs" / "b"
    holder(held)
    with pytest.raises(LeaseHeld):
        hold_leases([free, held])
    assert lease_module._HELD == {}
    # The free ring's lease was given back: another driver can take it.
    other = DriverLease(free)
    assert other.acquire() is None
    other.release()
    assert hold_leases([free]) == []
    release_leases()
    assert json.loads(lease_path(free).read_text())["released_at"] > 0
