"""An execution stopped by a signal (docs/operations.md#recovery-after-a-stop).

The driver relays SIGINT and SIGTERM to the supervisors of its executions
(workflow/relay.py); each stops its program's tree and records `interrupted` with
`budget_cut: false`, and the resumed ring runs it again (workflow/resume.py sets its
records aside first).

Interrupted with the ring (the driver marked the relay before sending it, or the
terminal's Ctrl-C reached the step itself), the step ends as a job that did its work: its
records stay, so the ring's summary, `status` and `verify` see the interruption until the
ring runs again. Snakemake removes a failed job's outputs, which the ledger has already
hashed, and answers SIGTERM by waiting for its running jobs, which fail. A step
interrupted on its own (its supervisor signalled from outside, while the ring goes on)
still fails its job (EXIT_INTERRUPTED): the ring stops there rather than decide without
the run.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Mapping
from pathlib import Path

from . import statuses
from .errors import RingflowError
from .jsonio import atomic_write_json, read_json
from .layout import RingLayout
from .node_state import ExecutionResult

EXIT_INTERRUPTED = 3


def stopped_by_signal(result: ExecutionResult | Mapping) -> bool:
    """Interrupted by a signal or a lost parent, not by the ring's clock: run it again."""
    if not isinstance(result, ExecutionResult):
        result = ExecutionResult.from_record(result)
    if result.status != statuses.INTERRUPTED or result.budget_cut:
        return False
    if result.slurm_state:
        return False  # SLURM ended its job: recorded as such, the ring went on (docs/slurm.md)
    return any(e.get("event") in ("signal", "orphaned") for e in result.events or ())


def mark_relayed(ring_root: str | os.PathLike, signum: int) -> None:
    """Note, before the driver relays `signum` to the ring's executions, that it does."""
    layout = RingLayout(Path(ring_root))
    layout.locks.mkdir(exist_ok=True)
    record = {"at": time.time(), "signal": signal.Signals(signum).name, "driver": os.getpid()}
    atomic_write_json(layout.interrupt_mark, record)


def relayed_since(ring_root: str | os.PathLike, since: float) -> str | None:
    """The signal the ring's driver relayed to its executions at or after `since` (its
    name, e.g. SIGINT), or None."""
    mark = RingLayout(Path(ring_root)).interrupt_mark
    if not mark.exists():
        return None
    try:
        record = read_json(mark)
    except (OSError, ValueError, RingflowError):
        return None
    at = record.get("at")
    if not isinstance(at, (int, float)) or at < since:
        return None
    return str(record.get("signal") or "a signal")


def interrupted_with_ring(
    ring_root: str | os.PathLike, result: ExecutionResult, started: float
) -> bool:
    """Whether an execution stopped by a signal was stopped because its ring was: the
    terminal's Ctrl-C reached it, or its driver marked a relay since the step `started`."""
    if any(e.get("event") == "signal" and e.get("signal") == "SIGINT" for e in result.events):
        return True
    return relayed_since(ring_root, started) is not None
