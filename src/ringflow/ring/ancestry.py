"""Ancestor integrity (docs/operations.md#chains), checked recursively before a ring continues a
chain.

Every ring from the parent back to the first must still be there (its folder and its lock),
must not be marked tainted (`TAINTED`, written by `ringflow taint RING --why ...`), and its
ledger must verify with every anchor recorded outside it. Seals are not checked here: the
import checks them one by one and rejects only the work that fails.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from ..core.errors import InputError
from ..core.jsonio import atomic_write_json, read_json
from ..core.layout import RingLayout
from ..core.ledger import Ledger, emit_event

TAINT_FILE = "TAINTED"


def taint_reason(ring_dir: Path) -> str | None:
    path = Path(ring_dir) / TAINT_FILE
    if not path.exists() and not path.is_symlink():
        return None
    try:
        return str(read_json(path).get("why") or "no reason given")
    except (InputError, AttributeError):
        return "marked tainted (TAINTED could not be read)"


def taint(ring_dir: str | Path, why: str) -> dict:
    """Mark a ring tainted: no ring may continue from it or from a ring after it."""
    root = Path(ring_dir).resolve()
    if not RingLayout(root).ring_json.is_file():
        raise InputError(f"{root}: not a ring folder (RING.json not found)")
    if not why or not why.strip():
        raise InputError("taint: say why (--why TEXT): the reason is shown to every ring "
                         "that refuses to continue from it")  # fmt: skip
    earlier = taint_reason(root)
    if earlier is not None:
        raise InputError(f"{root} is already tainted: {earlier}")
    record = {"why": why.strip(), "at": time.time(), "by": os.environ.get("USER") or os.getuid()}
    atomic_write_json(root / TAINT_FILE, record)
    Ledger(RingLayout(root).ledger).append("ring_tainted", why=record["why"])
    emit_event(root, "ring_tainted", why=record["why"])
    return record


def ancestor_problems(ring_dir: Path) -> list[str]:
    """Why one ring of a chain cannot be continued from (empty when it can)."""
    from ..core.ledger import ledger_anchors

    root = Path(ring_dir)
    if not root.is_dir():
        return ["its folder is missing"]
    if not RingLayout(root).ring_json.is_file():
        return ["its lock (RING.json) is missing"]
    problems = []
    why = taint_reason(root)
    if why is not None:
        problems.append(f"it is marked tainted: {why}")
    ledger = RingLayout(root).ledger
    if not ledger.is_file():
        problems.append("its ledger (ledger.jsonl) is missing")
    else:
        problems += Ledger(ledger).verify(ledger_anchors(RingLayout(root)))
    return problems


def chain_problems(previous: Path) -> list[str]:
    """Every problem of every ring from `previous` back to the first, each naming its ring."""
    problems: list[str] = []
    seen: set[Path] = set()
    ring_dir: Path | None = Path(previous).resolve()
    while ring_dir is not None:
        if ring_dir in seen:
            problems.append(f"continue_from forms a cycle at {ring_dir}")
            break
        seen.add(ring_dir)
        found = ancestor_problems(ring_dir)
        problems += [f"ancestor {ring_dir} does not verify: {p}" for p in found]
        lock = RingLayout(ring_dir).ring_json
        if not lock.is_file():
            break
        try:
            previous_rel = read_json(lock).get("continue_from")
        except InputError as exc:
            problems.append(f"ancestor {ring_dir}: {exc}")
            break
        ring_dir = (ring_dir / previous_rel).resolve() if previous_rel else None
    return problems


def check_ancestry(previous: Path | None) -> None:
    """Refuse to continue from a chain with any problem (docs/operations.md#chains), listing
    them."""
    if previous is None:
        return
    problems = chain_problems(previous)
    if problems:
        raise InputError(f"refusing to continue from {previous}: " + "; ".join(problems[:5]))
