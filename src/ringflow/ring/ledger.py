"""The ring's ledger: an append-only JSON-lines file, each line hash-chained to the one before.

Every line is {"seq", "ts", "kind", ...fields, "prev", "hash"} where "hash"
is the sha256 of the canonical JSON of the line without "hash", and "prev"
is the previous line's hash ("0" * 64 for the first). An edited, deleted or
reordered line breaks the chain; cutting lines off the end does not, so
whoever needs that guarantee records the head hash elsewhere.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from filelock import FileLock

from ..errors import InputError, RingflowError
from ..jsonio import append_jsonl, canonical_json, fsync_dir, sha256_json

GENESIS = "0" * 64
RESERVED_FIELDS = frozenset({"seq", "ts", "kind", "prev", "hash"})
TAIL_BLOCK = 8192


def record_hash(record: dict[str, Any]) -> str:
    """The hash of a ledger record: over everything but its own "hash" field."""
    return sha256_json({k: v for k, v in record.items() if k != "hash"})


def _read_last_line(path: Path) -> bytes | None:
    """The last line of a file (with its newline, if any), read from the end; None if empty."""
    with open(path, "rb") as handle:
        end = handle.seek(0, os.SEEK_END)
        if end == 0:
            return None
        tail = b""
        position = end
        while position > 0:
            step = min(TAIL_BLOCK, position)
            position -= step
            handle.seek(position)
            tail = handle.read(step) + tail
            # The final newline ends the last line; the one before it starts it.
            cut = tail.rfind(b"\n", 0, len(tail) - 1)
            if cut >= 0:
                return tail[cut + 1 :]
        return tail


class Ledger:
    """A hash-chained ledger file; appends are serialised by `path + ".lock"`."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._lock = FileLock(str(self.path) + ".lock")

    def _head(self) -> tuple[int, str]:
        """(seq, hash) of the last record, or (0, GENESIS) for an empty ledger."""
        try:
            last = _read_last_line(self.path)
        except FileNotFoundError:
            return 0, GENESIS
        if last is None:
            return 0, GENESIS
        if not last.endswith(b"\n"):
            raise RingflowError(
                f"ledger {self.path}: the last line is incomplete (no newline); "
                "run `ringflow verify` before appending"
            )
        try:
            record = json.loads(last)
            return int(record["seq"]), str(record["hash"])
        except (ValueError, KeyError, TypeError):
            raise RingflowError(
                f"ledger {self.path}: the last line is not a ledger record; "
                "run `ringflow verify` before appending"
            ) from None

    def append(self, kind: str, **fields: Any) -> dict[str, Any]:
        """Append one chained record and fsync it; returns the record written."""
        if not isinstance(kind, str) or not kind:
            raise InputError(f"ledger: kind must be a non-empty string, got {kind!r}")
        clash = RESERVED_FIELDS.intersection(fields)
        if clash:
            raise InputError(f"ledger: field names {sorted(clash)} are reserved")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            seq, prev = self._head()
            record: dict[str, Any] = {
                "seq": seq + 1,
                "ts": time.time(),
                "kind": kind,
                **fields,
                "prev": prev,
            }
            record["hash"] = record_hash(record)
            line = canonical_json(record) + b"\n"
            created = not self.path.exists()
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                view = memoryview(line)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            if created:
                fsync_dir(self.path.parent)
        return record

    def verify(self) -> list[str]:
        """Check parse, seq, prev links and hashes: one problem per fault, with its line number."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return [f"ledger {self.path}: file not found"]
        problems: list[str] = []
        lines = data.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        elif lines:
            problems.append(f"line {len(lines)}: incomplete (no newline at the end)")
        expected_seq, prev = 1, GENESIS
        for number, raw in enumerate(lines, start=1):
            where = f"line {number}"
            try:
                record = json.loads(raw)
            except ValueError as exc:
                problems.append(f"{where}: not valid JSON ({exc.msg})")
                expected_seq += 1
                prev = None
                continue
            if not isinstance(record, dict):
                problems.append(f"{where}: not a JSON object")
                expected_seq += 1
                prev = None
                continue
            seq = record.get("seq")
            if seq != expected_seq:
                problems.append(f"{where}: seq is {seq!r}, expected {expected_seq}")
            if prev is not None and record.get("prev") != prev:
                problems.append(f"{where}: prev does not link to the hash of the line before")
            stored = record.get("hash")
            if stored != record_hash(record):
                problems.append(f"{where}: hash does not match the record (edited?)")
            # Continue from what this line claims, so one fault is reported once.
            expected_seq = seq + 1 if isinstance(seq, int) else expected_seq + 1
            prev = stored if isinstance(stored, str) else None
        return problems


def emit_event(ring_dir: str | os.PathLike, kind: str, **fields: Any) -> dict[str, Any]:
    """Append an (unchained) observability event to ring_dir/events.jsonl."""
    event = {"ts": time.time(), "kind": kind, **fields}
    append_jsonl(Path(ring_dir) / "events.jsonl", event, fsync=False)
    return event
