"""The node index as the search grows it: new nodes are added (and settled) under a lock.

`nodes/index.json` is made by the import checkpoint; engineered nodes join it when a
generation plans them and are updated when their session ends, so promotion, reports and
the execution rules see every node of the ring in one place. The file is always replaced
atomically.
"""

from __future__ import annotations

import fcntl
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from ..core.jsonio import atomic_write_json, read_json
from ..core.layout import RingLayout


@contextmanager
def _locked(layout: RingLayout):
    layout.locks.mkdir(parents=True, exist_ok=True)
    with open(layout.locks / "index.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def update_index(layout: RingLayout, change: Callable[[dict], None]) -> dict:
    """Read the index, apply `change` to it in place, write it back; all under the lock."""
    with _locked(layout):
        index = read_json(layout.nodes_index)
        change(index)
        atomic_write_json(layout.nodes_index, index)
        return index


def set_entry(index: dict, entry: dict) -> None:
    """Add a node's index entry, or replace the entry with the same id."""
    for i, existing in enumerate(index["nodes"]):
        if existing["id"] == entry["id"]:
            index["nodes"][i] = entry
            return
    index["nodes"].append(entry)


def add_keys(index: dict, owners: dict) -> None:
    """Keys not yet known get their trainer; a key already known keeps its first trainer."""
    for key, owner in owners.items():
        index["keys"].setdefault(key, owner)


def node_number(node_id: str) -> int:
    return int(node_id[1:].split("-", 1)[0])


def next_number(index: dict) -> int:
    return max((node_number(n["id"]) for n in index["nodes"]), default=0) + 1


def index_path(ring_dir: str | Path) -> Path:
    return RingLayout(Path(ring_dir)).nodes_index
