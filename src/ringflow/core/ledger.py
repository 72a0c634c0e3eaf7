"""The ring's ledger: an append-only JSON-lines file, each line hash-chained to the one before.

Every line is {"seq", "ts", "kind", ...fields, "prev", "hash"} where "hash"
is the sha256 of the canonical JSON of the line without "hash", and "prev"
is the previous line's hash ("0" * 64 for the first). An edited, deleted or
reordered line breaks the chain; cutting lines off the end does not, so the
head is anchored outside the ledger: every append rewrites `ledger.head`
beside it, every result.json records the head it saw, and `verify` checks
that each anchored (seq, hash) is still in the ledger.

Those anchors live in the ring folder, where an editor can rewrite them too. So the
ledger of a ring (a ledger beside its RING.json) is also anchored in the ring's weights
store (docs/integrity.md): each line carries "sig", an HMAC under the store's secret of the
line and the ring's identity (ring id and the sha256 of RING.json), and each append adds
the new head to the store's `anchors/heads.jsonl`. A chain rebuilt from the ring folder
alone has no valid signatures; a ledger cut short or rolled back misses anchored heads.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from .anchors import StoreAnchors
from .brief_lock import brief_lock
from .durability import grouped, sync_ledger
from .errors import InputError, RingflowError
from .hints import ringflow_hint
from .jsonio import (
    append_jsonl,
    atomic_write_bytes,
    atomic_write_json,
    canonical_json,
    fsync_dir,
    read_jsonl_objects,
    sha256_json,
)
from .layout import RingLayout

GENESIS = "0" * 64
RESERVED_FIELDS = frozenset({"seq", "ts", "kind", "prev", "hash", "sig"})
TAIL_BLOCK = 8192
RECORD_WRITTEN = "record_written"
# A record removed on purpose (an interrupted run's, set aside to run again): its absence
# is then what the ledger says, not a loss.
RECORD_WITHDRAWN = "record_withdrawn"
# Problems of one kind listed one by one before the rest are only counted.
LISTED = 3


class RingContext:
    """The ring a ledger belongs to: its identity and the store that anchors it."""

    def __init__(self, anchors: StoreAnchors, identity: dict[str, str], ring_dir: Path):
        self.anchors = anchors
        self.identity = identity
        self.ring_dir = ring_dir


_contexts: dict[str, tuple[tuple[int, int, int], RingContext | None]] = {}


def ring_context(ledger_path: Path) -> RingContext | None:
    """The ring of a ledger that lies beside a RING.json naming a store; else None."""
    lock = RingLayout(Path(ledger_path).parent).ring_json
    try:
        st = os.stat(lock)
    except FileNotFoundError:
        return None
    stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
    hit = _contexts.get(str(lock))
    if hit is not None and hit[0] == stamp:
        return hit[1]
    data = lock.read_bytes()
    try:
        # The lock's bytes are hashed as they are; a malformed one names no ring.
        record = json.loads(data)
        store, ring_id = record.get("store"), record.get("ring_id")
    except (ValueError, AttributeError):
        store = ring_id = None
    context = None
    if isinstance(store, str) and store and isinstance(ring_id, str):
        identity = {"ring": ring_id, "lock": hashlib.sha256(data).hexdigest()}
        context = RingContext(StoreAnchors(store), identity, lock.parent.resolve())
    _contexts[str(lock)] = (stamp, context)
    return context


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
        self._lock = brief_lock(str(self.path) + ".lock")
        self.head_path = self.path.with_suffix(".head")

    @property
    def context(self) -> RingContext | None:
        return ring_context(self.path)

    def _repair_hint(self) -> str:
        """The command that repairs this ledger: a ring's, by its folder."""
        return ringflow_hint("ledger", "repair", self.path.parent)

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
                f"`{self._repair_hint()}` cuts a torn last line"
            )
        try:
            record = json.loads(last)
            return int(record["seq"]), str(record["hash"])
        except (ValueError, KeyError, TypeError):
            raise RingflowError(
                f"ledger {self.path}: the last line is not a ledger record; "
                f"`{self._repair_hint()}` cuts a torn last line"
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
            return self._append_locked(kind, fields)

    def _append_locked(self, kind: str, fields: dict[str, Any]) -> dict[str, Any]:
        context = self.context
        seq, prev = self._head()
        record: dict[str, Any] = {
            "seq": seq + 1,
            "ts": time.time(),
            "kind": kind,
            **fields,
            "prev": prev,
        }
        if context is not None:
            record["sig"] = context.anchors.sign_record(context.identity, record)
        record["hash"] = record_hash(record)
        line = canonical_json(record) + b"\n"
        created = not self.path.exists()
        anchor = None
        if context is not None:
            anchor = functools.partial(
                context.anchors.anchor_head,
                context.identity,
                str(context.ring_dir),
                record["seq"],
                record["hash"],
            )
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            view = memoryview(line)
            while view:
                view = view[os.write(fd, view) :]
            # The line, then the store's anchor of it (at once, under the ledger lock, so
            # the store's heads of a ring come in ledger order; or at a group's end).
            sync_ledger(fd, self.path, anchor)
        finally:
            os.close(fd)
        if created and not grouped():
            fsync_dir(self.path.parent)
        # The head is a convenience copy of the last line, never synced: a crash may leave
        # an older head (still in the ledger) or an unreadable one, which verify skips; what
        # vouches for the ledger's length is the line itself, synced above, and the store.
        atomic_write_json(self.head_path, {"seq": record["seq"], "hash": record["hash"]},
                          durable=False)  # fmt: skip
        return record

    def write_record(self, path: str | os.PathLike, data: bytes, mode: int = 0o644) -> dict:
        """Write a deciding record atomically and hash it into the ledger, both under the
        ledger's lock, so the ledger's latest hash of a path is that of its latest bytes."""
        path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            atomic_write_bytes(path, data, mode)
            return self._append_locked(RECORD_WRITTEN, self._record_fields(path, data))

    def withdraw_record(self, path: str | os.PathLike, why: str) -> dict | None:
        """Remove a deciding record and say so in the ledger, both under its lock; None
        when there was nothing to remove."""
        path = Path(path)
        with self._lock:
            fields = self._record_fields(path, b"")
            try:
                path.unlink()
            except FileNotFoundError:
                return None
            return self._append_locked(RECORD_WITHDRAWN, {"path": fields["path"], "why": why})

    def hash_record(self, path: str | os.PathLike) -> dict:
        """Hash a deciding record already in place (one moved there whole) into the ledger."""
        path = Path(path)
        with self._lock:
            return self._append_locked(RECORD_WRITTEN, self._record_fields(path, path.read_bytes()))

    def _record_fields(self, path: Path, data: bytes) -> dict[str, Any]:
        root = self.path.parent.resolve()
        try:
            rel = path.resolve().relative_to(root).as_posix()
        except ValueError:
            raise InputError(f"ledger: record {path} lies outside the ring {root}") from None
        return {"path": rel, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}

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
        records = []
        for raw in data.split(b"\n"):
            try:
                record = json.loads(raw)
                hashes[record["seq"]] = record["hash"]
                records.append(record)
            except (ValueError, KeyError, TypeError):
                continue
        context = self.context
        if context is not None:
            problems += self._store_problems(context, records, hashes)
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

    def _store_problems(self, context: RingContext, records: list[dict],
                        hashes: dict[int, str]) -> list[str]:  # fmt: skip
        """The ledger against the store that anchors it: every line signed with the store's
        secret, every head the store anchored still in the ledger."""
        anchors = context.anchors
        try:
            secret = anchors.secret(create=False)
        except (OSError, ValueError) as exc:
            return [f"the store's anchors secret cannot be read: {exc}"]
        if secret is None:
            return [f"the store {anchors.store} holds no anchors secret, so nothing vouches "
                    "for this ledger (another store, or a store made afresh)"]  # fmt: skip
        problems = []
        unsigned = [r.get("seq") for r in records
                    if not anchors.record_signed(context.identity, r, secret)]  # fmt: skip
        if unsigned:
            shown = ", ".join(str(s) for s in unsigned[:LISTED])
            more = f" and {len(unsigned) - LISTED} more" if len(unsigned) > LISTED else ""
            problems.append(
                f"line(s) {shown}{more} are not signed with the secret of the "
                f"store {anchors.store}: written or rewritten outside ringflow"
            )
        heads, faults = anchors.heads(context.identity)
        problems += faults
        if not heads and records:
            problems.append(f"the store {anchors.store} anchors no head of ring "
                            f"{context.identity['ring']} with this RING.json: the ledger "
                            "(or the lock) is not the one the store saw")  # fmt: skip
            return problems
        anchored = dict(heads)
        missing = sorted(seq for seq in anchored if seq not in hashes)
        if missing:
            problems.append(f"the store anchors line(s) {', '.join(map(str, missing[:LISTED]))}"
                            f" of this ledger, which it does not have ({len(hashes)} records): "
                            "the ledger was cut short or rolled back")  # fmt: skip
        changed = sorted(s for s, h in anchored.items() if s in hashes and hashes[s] != h)
        if changed:
            problems.append(f"line(s) {', '.join(map(str, changed[:LISTED]))} differ from the "
                            "heads the store anchored: the ledger was rewritten")  # fmt: skip
        return problems

    def records(self) -> list[dict[str, Any]]:
        """The ledger's records that parse (an unreadable ledger has none)."""
        return read_jsonl_objects(self.path)

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
    append_jsonl(RingLayout(Path(ring_dir)).events, event, fsync=False)
    return event


def ledger_anchors(layout: RingLayout) -> list[tuple[str, Any]]:
    """(where, {"seq", "hash"}) of every ledger head recorded outside the ledger:
    `ledger.head`, each result.json, and stop_manifest.json when it exists."""
    anchors: list[tuple[str, Any]] = []
    head = layout.root / "ledger.head"
    sources = [head] if head.exists() else []
    sources += [path for *_, path in layout.results()]
    manifest = layout.stop_manifest
    if manifest.exists():
        sources.append(manifest)
    for path in sources:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        anchor = data if path == head else data.get("ledger_head")
        if anchor is not None:
            anchors.append((str(path.relative_to(layout.root)), anchor))
    return anchors
