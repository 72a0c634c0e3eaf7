"""Whether an interrupted execution's job keeps its records (core/interrupts.py)."""

from __future__ import annotations

import signal
import time

from ringflow.core.interrupts import interrupted_with_ring, mark_relayed
from ringflow.core.node_state import ExecutionResult


def _interrupted(by: str) -> ExecutionResult:
    return ExecutionResult.from_record({
        "status": "interrupted", "budget_cut": False, "reason": f"supervisor received {by}",
        "events": [{"event": "signal", "signal": by, "at": time.time()}],
    })  # fmt: skip


def test_only_a_relay_marked_since_the_step_started_counts(tmp_path):
    started = time.time()
    assert not interrupted_with_ring(tmp_path, _interrupted("SIGTERM"), started)
    mark_relayed(tmp_path, signal.SIGTERM)
    assert interrupted_with_ring(tmp_path, _interrupted("SIGTERM"), started)
    # A mark a driver left before this step started is another interruption's.
    assert not interrupted_with_ring(tmp_path, _interrupted("SIGTERM"), time.time() + 1)


def test_the_terminals_ctrl_c_counts_without_a_mark(tmp_path):
    assert interrupted_with_ring(tmp_path, _interrupted("SIGINT"), time.time())
    assert not interrupted_with_ring(tmp_path, _interrupted("SIGHUP"), time.time())


def test_the_relayed_signal_is_named_for_the_runs_it_stopped(tmp_path):
    from ringflow.core.interrupts import relayed_since

    started = time.time()
    assert relayed_since(tmp_path, started) is None
    mark_relayed(tmp_path, signal.SIGINT)
    assert relayed_since(tmp_path, started) == "SIGINT"
    assert relayed_since(tmp_path, time.time() + 1) is None
