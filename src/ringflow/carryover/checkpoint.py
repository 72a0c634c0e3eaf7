"""What an authoritative execution cut by the cutoff leaves for its seal
(docs/operations.md#carryover).

The working copy of a run is removed when it ends; a training run cut at the cutoff may
have written a last checkpoint into its weights folder during the grace. That folder is
moved to `exec/<view>/s0/checkpoint/` before the copy goes, so the seal can take it as
evidence (the next ring trains from scratch: there is no training-resume protocol).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ..core import statuses
from ..core.node_state import ExecutionResult
from ..core.state import Ring
from ..workcopy import reset_dir

CHECKPOINT_DIR = "checkpoint"
AUTHORITATIVE_VARIANT = "s0"


def is_authoritative(ring: Ring, view: str, variant: str) -> bool:
    """Seed 0 on a search view: the execution whose score ranks the node."""
    return variant == AUTHORITATIVE_VARIANT and view in ring.search_views


def is_carried_cut(result: ExecutionResult) -> bool:
    """Cut by the ring's clock, and stopped whole: what a seal may take."""
    return (
        result.status == statuses.INTERRUPTED and bool(result.budget_cut) and not result.reap_left
    )


def keep_grace_checkpoint(ring: Ring, view: str, variant: str, result: ExecutionResult, work: Path,
                          weights_rel: list[str], exec_dir: Path) -> list[str]:  # fmt: skip
    """Move the weights folders of a cut authoritative run out of its working copy; the
    folders kept (relative to the solution)."""
    if not (is_authoritative(ring, view, variant) and is_carried_cut(result)) or not weights_rel:
        return []
    kept = []
    dest = reset_dir(exec_dir / CHECKPOINT_DIR)
    for rel in weights_rel:
        source = work / rel
        if source.is_dir() and not source.is_symlink() and any(source.iterdir()):
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(source), str(dest / rel))
            kept.append(rel)
    return kept
