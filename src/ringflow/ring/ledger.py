"""The ring's ledger: an append-only JSON-lines file, each line hash-chained to the one before.

Every line is {"seq", "ts", "kind", ...fields, "prev", "hash"} where "hash"
is the sha256 of the canonical JSON of the line without "hash", and "prev"
is the previous line's hash ("0" * 64 for the first). An edited, deleted or
reordered line breaks the chain; cutting lines off the end does not, so the
head is anchored outside the ledger: every append rewrites `ledger.head`
beside it, every result.json records the head it saw, and `verify` checks
that each anchored (seq, hash) is still in the ledger.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from filelock import FileLock

from ..errors import InputError, RingflowError
from ..jsonio import append_jsonl, atomic_write_json, canonical_json, fsync_dir, sha256_json

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
        self.head_path = self.path.with_suffix(".head")

    def head(self) -> dict[str, Any]:
        """{"seq", "hash"} of the last record, as anchors record it."""
        seq, digest = self._head()
        return {"seq": seq, "hash": digest}

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
                "`ringflow ledger repair` cuts a torn last line"
            )
        try:
            record = json.loads(last)
            return int(record["seq"]), str(record["hash"])
        except (ValueError, KeyError, TypeError):
            raise RingflowError(
                f"ledger {self.path}: the last line is not a ledger record; "
                "`ringflow ledger repair` cuts a torn last line"
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
            atomic_write_json(self.head_path, {"seq": record["seq"], "hash": record["hash"]})
        return record

    def verify(self, anchors: list[tuple[str, Any]] = ()) -> list[str]:
        """Check parse, seq, prev links and hashes: one problem per fault, with its line number.

        Each anchor (where, {"seq", "hash"}) must still be in the ledger: a ledger cut short
        or rewritten after the anchor was taken fails here.
        """
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return [f"ledger {self.path}: file not found"]
        problems = self._verify_chain(data)
        hashes = {}
        for raw in data.split(b"\n"):
            try:
                record = json.loads(raw)
                hashes[record["seq"]] = record["hash"]
            except (ValueError, KeyError, TypeError):
                continue
        for where, anchor in anchors:
            if not isinstance(anchor, dict) or not isinstance(anchor.get("seq"), int):
                problems.append(f"{where}: no valid ledger anchor ({anchor!r})")
                continue
            seq = anchor["seq"]
            if seq == 0:
                continue
            if seq not in hashes:
                problems.append(
                    f"{where} anchors line {seq}, which the ledger does not have "
                    f"(it has {len(hashes)} records): the ledger was cut short"
                )
            elif hashes[seq] != anchor.get("hash"):
                problems.append(f"{where} anchors line {seq} with another hash: the ledger was "
                                "rewritten")  # fmt: skip
        return problems

    def repair(self) -> dict[str, Any] | None:
        """Cut a torn last line (a killed append); None when the ledger needs no repair.

        Only the last line is ever touched, and only when every line before it verifies;
        the cut bytes are kept beside the ledger. A complete last record that only lacks
        its newline gets the newline instead. Anything else is refused with the problems.
        """
        with self._lock:
            data = self.path.read_bytes()
            if not self._verify_chain(data):
                return None
            body, _, last = data.rstrip(b"\n").rpartition(b"\n")
            head = body + b"\n" if body else b""
            if self._verify_chain(head):
                raise RingflowError(
                    f"ledger {self.path}: not only its last line is damaged ("
                    + "; ".join(self._verify_chain(data)[:3])
                    + "); it is left as it is"
                )
            if not data.endswith(b"\n") and not self._verify_chain(head + last + b"\n"):
                with open(self.path, "ab") as handle:
                    handle.write(b"\n")
                    handle.flush()
                    os.fsync(handle.fileno())
                return {"action": "completed", "line": head.count(b"\n") + 1}
            kept = self.path.with_name(f"{self.path.name}.torn-{time.time_ns()}")
            kept.write_bytes(data[len(head) :])
            fd = os.open(self.path, os.O_WRONLY)
            try:
                os.ftruncate(fd, len(head))
                os.fsync(fd)
            finally:
                os.close(fd)
            return {
                "action": "cut",
                "line": head.count(b"\n") + 1,
                "bytes": len(data) - len(head),
                "kept_in": kept.name,
            }

    def _verify_chain(self, data: bytes) -> list[str]:
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


def ledger_anchor(path: str | os.PathLike) -> dict[str, Any] | None:
    """The ledger's head as a record outside it stores it; None when it cannot be read."""
    try:
        return Ledger(path).head()
    except RingflowError:
        return None


def emit_event(ring_dir: str | os.PathLike, kind: str, **fields: Any) -> dict[str, Any]:
    """Append an (unchained) observability event to ring_dir/events.jsonl."""
    event = {"ts": time.time(), "kind": kind, **fields}
    append_jsonl(Path(ring_dir) / "events.jsonl", event, fsync=False)
    return event
