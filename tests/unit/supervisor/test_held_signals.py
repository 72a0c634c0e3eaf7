"""Signals held while a step writes its records (supervisor/held_signals.py)."""

from __future__ import annotations

import os
import signal
import sys
import time

from ringflow.core import statuses
from ringflow.supervisor import ResourceLimits
from ringflow.supervisor.held_signals import held_signals, pending
from supervisetools import supervised


def test_a_signal_in_the_block_is_held_not_acted_on():
    before = signal.getsignal(signal.SIGTERM)
    with held_signals() as held:
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)  # would raise KeyboardInterrupt unheld
        assert held == [signal.SIGTERM, signal.SIGINT]
        assert pending() == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) == before
    with held_signals() as held:
        assert held == [] and pending() is None  # each block starts with none held


def test_a_run_started_with_a_signal_held_stops_at_once_as_interrupted(tmp_path):
    with held_signals():
        os.kill(os.getpid(), signal.SIGTERM)
        started = time.monotonic()
        outcome = supervised(tmp_path, [sys.executable, "-c", "import time; time.sleep(60)"],
                             ResourceLimits())  # fmt: skip
        took = time.monotonic() - started
        handler = signal.getsignal(signal.SIGTERM)
    assert outcome.status == statuses.INTERRUPTED and not outcome.budget_cut
    assert {"event": "signal", "signal": "SIGTERM"}.items() <= next(
        e for e in outcome.events if e["event"] == "signal"
    ).items()
    assert took < 20, "the run went on although a signal was held"
    assert handler is not None and handler != signal.SIG_DFL  # the hold was put back after


def test_a_run_without_a_held_signal_runs_to_its_end(tmp_path):
    with held_signals():
        outcome = supervised(tmp_path, [sys.executable, "-c", "pass"], ResourceLimits())
    assert outcome.status == statuses.OK
