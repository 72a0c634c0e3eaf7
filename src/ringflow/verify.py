"""`ringflow verify`: the ledger chain and its anchors (in the ring and in the store), every
deciding record against its ledger hash, every registered object, and the ring's ancestors
(docs/integrity.md)."""

from __future__ import annotations

from pathlib import Path

from .carryover.seal import seal_check
from .core.clock import load_ring
from .core.errors import InputError
from .core.layout import RingLayout
from .core.ledger import Ledger, ledger_anchors
from .core.records import record_problems
from .core.seeds import chain_rings
from .ring.ancestry import chain_problems
from .ring.edits import find_edits
from .ring.lock import lock_anchor_problems
from .weights.heal import check_store_index, missing_store, rings_of_store
from .weights.store import WeightsStore


def verify_ring(ring_dir) -> list[str]:
    problems: list[str] = []
    try:
        ring = load_ring(ring_dir)
    except InputError as exc:
        return [str(exc)]
    layout = RingLayout(Path(ring.ring_dir))
    if not layout.ledger.exists():
        problems.append(f"{layout.ledger}: missing")
    else:
        problems += [f"ledger: {p}" for p in Ledger(layout.ledger).verify(ledger_anchors(layout))]
        problems += lock_anchor_problems(layout.root)
        problems += [f"record: {p}" for p in record_problems(layout.root)]
    if missing_store(ring):
        # Checking must not create it (a WeightsStore makes its folders).
        problems.append(missing_store(ring))
    else:
        store = WeightsStore(ring.store)
        problems += [f"store: {p}" for p in store.verify()]
        # The store's index and the ledgers of the rings that wrote it tell the same story.
        try:
            problems += [f"store: {p}" for p in check_store_index(store, rings_of_store(ring))]
        except InputError as exc:
            problems.append(f"store: the index could not be compared with the ledgers: {exc}")
    problems += [f"edited: {e}" for e in find_edits(layout.root)]
    if ring.continue_from:
        previous = (layout.root / ring.continue_from).resolve()
        try:
            for ancestor in chain_rings(previous):
                root = Path(ancestor.ring_dir)
                ledger = RingLayout(root).ledger
                if not ledger.exists():
                    problems.append(f"ancestor {ancestor.ring_dir}: ledger missing")
                    continue
                anchors = ledger_anchors(RingLayout(root))
                problems += [
                    f"ancestor {ancestor.ring_dir}: {p}"
                    for p in Ledger(ledger).verify(anchors) + lock_anchor_problems(ledger.parent)
                ]
        except InputError as exc:
            problems.append(f"ancestors: {exc}")
        problems += [p for p in chain_problems(previous) if "tainted" in p]
    problems += [f"seal: {p}" for p in seal_check(layout)]
    return problems
