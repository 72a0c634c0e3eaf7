"""An execution stopped by a signal (docs/operations.md#recovery-after-a-stop).

The driver relays SIGINT and SIGTERM to the supervisors of its executions
(workflow/relay.py); each stops its program's tree and records `interrupted` with
`budget_cut: false`. Such an execution is a failed job (`ringflow step execute` exits
EXIT_INTERRUPTED), so Snakemake forgets its outputs and runs it again when the ring is run
again.
"""

from __future__ import annotations

from collections.abc import Mapping

from . import statuses
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
