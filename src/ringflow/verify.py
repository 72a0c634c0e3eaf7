"""`ringflow verify`: the ledger chain, every registered object, and the ring's ancestors."""

from __future__ import annotations

from pathlib import Path

from .errors import InputError
from .ring.clock import load_ring
from .ring.edits import find_edits
from .ring.layout import RingLayout
from .ring.ledger import Ledger
from .selection.seeds import chain_rings
from .weights.store import WeightsStore


def verify_ring(ring_dir) -> list[str]:
    problems: list[str] = []
    try:
        ring = load_ring(ring_dir)
    except InputError as exc:
        return [str(exc)]
    layout = RingLayout(Path(ring["ring_dir"]))
    if not layout.ledger.exists():
        problems.append(f"{layout.ledger}: missing")
    else:
        problems += [f"ledger: {p}" for p in Ledger(layout.ledger).verify()]
    problems += [f"store: {p}" for p in WeightsStore(ring["store"]).verify()]
    problems += [f"edited: {e}" for e in find_edits(layout.root)]
    if ring.get("continue_from"):
        previous = (layout.root / ring["continue_from"]).resolve()
        try:
            for ancestor in chain_rings(previous):
                ledger = Path(ancestor["ring_dir"]) / "ledger.jsonl"
                if not ledger.exists():
                    problems.append(f"ancestor {ancestor['ring_dir']}: ledger missing")
                    continue
                problems += [
                    f"ancestor {ancestor['ring_dir']}: {p}" for p in Ledger(ledger).verify()
                ]
        except InputError as exc:
            problems.append(f"ancestors: {exc}")
    return problems
