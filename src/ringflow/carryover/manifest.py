"""`stop_manifest.json` (docs/operations.md#carryover): what a ring hands to the rings that continue
it, written when it stops. It names the ring's lock, every seal (with its ledger line), every
evidence seal apart (`evidence`: never carried), the work this ring resumed and the
carryover it rejected, and it anchors the ledger's head, so
`ringflow verify` notices a ledger cut short after the ring stopped.
"""

from __future__ import annotations

import time
from pathlib import Path

from ..core.clock import load_ring
from ..core.jsonio import atomic_write_json, read_json
from ..core.layout import RingLayout
from ..core.ledger import ledger_anchor
from .rescoring import obligations
from .seal import CARRYOVER, EVIDENCE, listed, lock_sha256, sealed_records

MANIFEST = "stop_manifest.json"


def _optional(path: Path) -> dict:
    return read_json(path) if path.is_file() else {}


def write_stop_manifest(ring_dir: str | Path) -> dict:
    ring = load_ring(ring_dir)
    layout = RingLayout(Path(ring.ring_dir))
    imported = _optional(layout.root / "carryover" / "imported.json")
    seals, evidence = (
        [
            listed(node, record, target)
            for node, record in sorted(sealed_records(layout.ledger, target.ledger_kind).items())
        ]
        for target in (CARRYOVER, EVIDENCE)
    )
    manifest = {
        "ring_id": ring.ring_id,
        "lock_sha256": lock_sha256(layout.root),
        "search_hash": ring.search_hash,
        "continue_from": ring.continue_from,
        "seals": seals,
        "evidence": evidence,
        "resumed": imported.get("queue", []),
        "carryover_rejected": imported.get("rejected", []),
        "resume_refused": imported.get("refused", []),
        # Rescores the cutoff cut: the next ring re-executes them (docs/operations.md#chains).
        "rescore_obligations": obligations(layout.root),
        "stopped_at": time.time(),
        # Taken last: every line above is already in the ledger.
        "ledger_head": ledger_anchor(layout.ledger),
    }
    atomic_write_json(layout.root / MANIFEST, manifest)
    return manifest
