"""The per-ring target of a weights key (docs/contracts.md#weights): it exists once the key can be
replayed."""

from __future__ import annotations

import time
from pathlib import Path

from ..core.clock import load_ring
from ..core.jsonio import atomic_write_json, read_json
from ..core.layout import RingLayout
from ..core.node_state import read_result
from .store import WeightsStore


def write_key_target(ring_dir: str | Path, key: str) -> dict:
    ring = load_ring(ring_dir)
    layout = RingLayout(Path(ring.ring_dir))
    owner = read_json(layout.nodes_index)["keys"][key]
    entry = WeightsStore(ring.store).find(key)
    record = {
        "key": key,
        "registered": entry is not None,
        "source": "store" if owner["in_store"] else "trainer",
        "trainer": owner["trainer"],
        "who": None if entry is None else entry.get("who"),
        "at": time.time(),
    }
    if entry is None and owner["trainer"]:
        trainer = read_result(layout.result(*owner["trainer"]))
        # The key stays unregistered; each replayer then takes the lock and trains itself.
        record["trainer_status"] = trainer.status
    atomic_write_json(layout.key_target(key), record)
    return record
