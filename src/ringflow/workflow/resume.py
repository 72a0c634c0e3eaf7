"""What a driver does to a ring it resumes before the DAG reads the ring's records.

An execution stopped by a signal or by losing its driver (a kill, a reboot) has a
result.json saying `interrupted`: a record of what happened, not a result. Snakemake sees
only that the file exists, so the record is set aside here and the execution runs again,
exactly as if it had not started (docs/operations.md#recovery-after-a-stop). An execution
the ring's clock cut (`budget_cut`) keeps its record: it is carried over, not retried.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from ..core.errors import InputError
from ..core.interrupts import stopped_by_signal
from ..core.layout import RingLayout
from ..core.ledger import Ledger, emit_event
from ..core.node_state import read_result


def _interrupted(result_path: Path) -> bool:
    try:
        return stopped_by_signal(read_result(result_path))
    except (OSError, InputError):
        return False  # a torn record is Snakemake's incomplete output: it re-runs anyway


def rerun_interrupted(root: Path) -> list[str]:
    """Remove the result and score of every execution stopped by a signal, so that the
    resumed ring runs it again; returns node/view/variant of each."""
    layout = RingLayout(Path(root))
    if layout.stop_manifest.exists():
        return []  # a finished ring is immutable
    again = []
    ledger = Ledger(layout.ledger)
    for node, view, variant, result in layout.results():
        if not _interrupted(result):
            continue
        # Withdrawn in the ledger, so that `verify` reads their absence until the run
        # ends again as what was meant, not as a loss.
        for path in (layout.score(node, view, variant), result):
            ledger.withdraw_record(path, "interrupted: runs again")
        again.append(f"{node}/{view}/{variant}")
    if again:
        emit_event(layout.root, "interrupted_rerun", executions=again)
    return again


def names_the_ring(root: Path, locked_paths: Iterable[str]) -> bool:
    """Whether any of Snakemake's locked paths (relative to the working folder, or
    absolute) lies in the ring's folder."""
    ring = os.path.abspath(root)
    return any(
        full == ring or full.startswith(ring + os.sep)
        for full in (os.path.abspath(path) for path in locked_paths)
    )


def locked_by_another_driver(root: Path, persistence, locking: bool) -> bool:
    """Whether Snakemake will refuse this run for a lock on the ring's files: the locks its
    persistence (file or database) holds before this run writes its own."""
    read_locks = getattr(persistence, "_read_locks", None)
    if not locking or read_locks is None:
        return False
    return names_the_ring(root, (path for _kind, path in read_locks()))
