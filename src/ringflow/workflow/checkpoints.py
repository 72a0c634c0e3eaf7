"""How the workflow's logic reads a checkpoint's output, in Snakemake and outside it.

Snakemake's `checkpoints.<rule>.get(**wildcards)` raises while a checkpoint's output is not
known to be complete, and the rule whose input function asked waits for it. The logic in
`ringflow.workflow.dag` asks through `Checkpoints.output(rule, **wildcards)`, so the same
functions run under Snakemake (`SnakemakeCheckpoints`) and in tests and tools over a ring
folder as it stands (`FolderCheckpoints`: complete means the file exists).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from ..core.layout import RingLayout

# Every checkpoint of a ring, in the order a ring reaches them, with its one declared output.
# The rules declare these same paths (rules/*.smk), so what a checkpoint writes and what the
# workflow reads cannot drift apart.
CHECKPOINT_OUTPUTS: dict[str, tuple[str, Callable[..., Path]]] = {
    "import_carryover": ("imported", lambda layout: layout.carryover_imported),
    "import_nodes": ("nodes", lambda layout: layout.nodes_static),
    "search_generation": ("generation", lambda layout, g: layout.generation(g)),
    "settle_generation": ("settled", lambda layout, g: layout.settled(g)),
    "seat_baseline": ("seated", lambda layout: layout.seated),
    "promote": ("promotion", lambda layout: layout.promotion),
    "rank": ("ranking", lambda layout: layout.ranking),
    "screen": ("screen", lambda layout, node: layout.screen(node)),
    "review": ("review", lambda layout, node: layout.review(node)),
    "verdict": ("verdict", lambda layout, rank: layout.verdict(rank)),
    "decide": ("decision", lambda layout: layout.decision),
}


class CheckpointPending(Exception):
    """A checkpoint whose output is not complete yet (outside Snakemake)."""

    def __init__(self, rule: str, wildcards: dict):
        super().__init__(f"checkpoint {rule} {wildcards or ''} has not completed")
        self.rule = rule
        self.wildcards = wildcards


class Checkpoints(Protocol):
    def output(self, rule: str, **wildcards) -> Path:
        """The checkpoint's output; raises while it is not complete."""
        ...


class SnakemakeCheckpoints:
    """Snakemake's checkpoints of one ring's module.

    An output once given is given again without asking Snakemake: its `get` expands the
    rule's output and looks it up among the checkpoints' created outputs, a set that only
    grows while Snakemake runs, so a checkpoint once complete stays complete under the
    same path. The input, priority and resource functions ask for the first checkpoints
    for every job, again at each update of the DAG; asking Snakemake each time was most
    of what they cost."""

    def __init__(self, checkpoints) -> None:
        self._checkpoints = checkpoints
        self._complete: dict[tuple, Path] = {}

    def output(self, rule: str, **wildcards) -> Path:
        known = (rule, *sorted(wildcards.items()))
        path = self._complete.get(known)
        if path is None:
            key = CHECKPOINT_OUTPUTS[rule][0]
            job = getattr(self._checkpoints, rule).get(**wildcards)  # raises while pending
            path = self._complete[known] = Path(getattr(job.output, key))
        return path


class FolderCheckpoints:
    """A ring folder as it stands: a checkpoint is complete when its output exists. Every
    output asked for is recorded in `asked`, in order."""

    def __init__(self, layout: RingLayout) -> None:
        self.layout = layout
        self.asked: list[tuple[str, dict]] = []

    def output(self, rule: str, **wildcards) -> Path:
        self.asked.append((rule, wildcards))
        path = CHECKPOINT_OUTPUTS[rule][1](self.layout, **wildcards)
        if not path.exists():
            raise CheckpointPending(rule, wildcards)
        return path
