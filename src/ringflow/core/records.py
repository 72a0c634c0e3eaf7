"""Deciding records (docs/integrity.md): each `result.json`, `score.json`, `node.json`, the
decision and `FINAL.json` is hashed into the ring's ledger as it is written, so an edit made
afterwards no longer matches the ledger's latest hash of its path.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from .layout import RingLayout
from .ledger import RECORD_WITHDRAWN, RECORD_WRITTEN, Ledger

# Deciding records that must each have a ledger hash (SEAL.json is hashed by its seal's
# own ledger line, checked with the seal).
DECIDING = (
    "nodes/*/node.json",
    "nodes/*/exec/*/*/result.json",
    "nodes/*/exec/*/*/score.json",
    "selection/decision.json",
    "final/FINAL.json",
)


def _ledger(ring_root: str | os.PathLike) -> Ledger:
    return Ledger(RingLayout(Path(ring_root)).ledger)


def write_record(ring_root: str | os.PathLike, path: str | os.PathLike, obj: Any) -> dict:
    """Write a deciding record as JSON (atomically) and hash it into the ring's ledger."""
    text = json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    return _ledger(ring_root).write_record(path, text.encode())


def hash_record(ring_root: str | os.PathLike, path: str | os.PathLike) -> dict:
    """Hash a deciding record that was moved into place whole."""
    return _ledger(ring_root).hash_record(path)


def recorded(ledger: Ledger) -> dict[str, dict]:
    """{path relative to the ring: its latest record_written or record_withdrawn line}."""
    latest: dict[str, dict] = {}
    for record in ledger.records():
        if record.get("kind") in (RECORD_WRITTEN, RECORD_WITHDRAWN) and isinstance(
            record.get("path"), str
        ):
            latest[record["path"]] = record
    return latest


def file_sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def record_fault(root: Path, rel: str, latest: dict[str, dict]) -> str | None:
    """Why one deciding record is not what the ledger says was written, or None."""
    line = latest.get(rel)
    if line is None:
        return f"{rel}: not hashed into the ledger (written outside ringflow?)"
    actual = file_sha256(root / rel)
    if line.get("kind") == RECORD_WITHDRAWN:
        if actual is None:
            return None  # set aside on purpose (its `why`), and still absent
        return (f"{rel}: present, though the ledger's line {line.get('seq')} withdrew it "
                "(written outside ringflow?)")  # fmt: skip
    if actual is None:
        return f"{rel}: missing, though the ledger hashed it (line {line.get('seq')})"
    if actual != line.get("sha256"):
        return (f"{rel}: edited after it was written (sha256 {actual[:12]}, the ledger's "
                f"line {line.get('seq')} has {str(line.get('sha256'))[:12]})")  # fmt: skip
    return None


def record_problems(root: str | os.PathLike) -> list[str]:
    """Every hashed record against its latest ledger hash; in a ring anchored in its store,
    every deciding record must have one."""
    root = Path(root)
    ledger = Ledger(RingLayout(root).ledger)
    latest = recorded(ledger)
    paths = set(latest)
    if ledger.context is not None:
        for pattern in DECIDING:
            paths.update(p.relative_to(root).as_posix() for p in root.glob(pattern))
    return [fault for rel in sorted(paths) if (fault := record_fault(root, rel, latest))]


class RingEvidence:
    """What a ring continuing another may trust of it: its ledger, verified once against
    the anchors in its folder and in its store, and its records against their hashes."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.ledger = Ledger(RingLayout(self.root).ledger)
        self._problems: list[str] | None = None
        self._latest: dict[str, dict] | None = None

    @property
    def ledger_problems(self) -> list[str]:
        if self._problems is None:
            from .ledger import ledger_anchors

            self._problems = self.ledger.verify(ledger_anchors(RingLayout(self.root)))
        return self._problems

    def untrusted(self) -> str | None:
        """Why nothing this ring's ledger says can be trusted, or None."""
        problems = self.ledger_problems
        if not problems:
            return None
        return (f"the ledger of {self.root} does not verify against its anchors: "
                + "; ".join(problems[:2]))  # fmt: skip

    def fault(self, rel: str) -> str | None:
        """Why one record of this ring is not what its ledger hashed, or None."""
        why = self.untrusted()
        if why is not None:
            return why
        if self._latest is None:
            self._latest = recorded(self.ledger)
        return record_fault(self.root, rel, self._latest)
