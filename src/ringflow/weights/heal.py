"""`ringflow store check` and `ringflow store repair` (docs/operations.md#recovery-after-a-stop).

check: rehash every object an index entry uses, list malformed entries, orphan objects,
leftovers of killed registrations, and compare the index with the ledgers of the rings
that wrote it (a registration in a ledger without its index entry, an entry without its
ledger record, or the two listing different files).

The index is also checked against the registrations the store's anchors recorded (key →
objects, docs/integrity.md): an entry that lists other objects than its registration (even
valid ones), or a registered key without an entry, is damage.

repair: an entry whose anchored objects are all present and intact is restored from the
anchors (the wrong entry, if any, kept in quarantine). Every other damaged entry and its
damaged objects are moved to `quarantine/<stamp>/` (kept, never deleted), the key's
registration is closed in the anchors, and the ring that registered it is named: the key is
missing again and the next ring that runs it trains it exactly once. Both are recorded in
the ring's ledger; leftovers whose registration is gone (its flock is free) are removed.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.anchors import same_files
from ..core.errors import DeadlineReached
from ..core.hashing import hash_files, sha256_file
from ..core.jsonio import atomic_write_json, fsync_dir
from ..core.layout import RingLayout
from ..core.state import Ring
from .keys import SHA256_PATTERN
from .store import OBJECT_MODE, WeightsStore, _index_fault, remove_if_owner_gone

# How long repair waits for a key that an execution is training or replaying.
KEY_LOCK_WAIT_S = 30.0


@dataclass
class Damage:
    """One index entry that cannot be replayed, and the objects at fault."""

    index: Path
    key: str
    tree: str
    reason: str
    objects: list[str] = field(default_factory=list)
    # The registration the store's anchors recorded for the key, when there is one.
    anchored: dict | None = None


@dataclass
class StoreReport:
    damaged: list[Damage] = field(default_factory=list)
    orphans: list[Path] = field(default_factory=list)
    leftovers: list[Path] = field(default_factory=list)
    unexpected: list[Path] = field(default_factory=list)
    ledger_problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    entries: int = 0
    objects: int = 0

    @property
    def problems(self) -> list[str]:
        out = [f"damaged: key {d.key} ({d.index}): {d.reason}" for d in self.damaged]
        out += [f"leftover of an interrupted registration: {p}" for p in self.leftovers]
        out += [f"unexpected file in the store: {p}" for p in self.unexpected]
        return out + self.ledger_problems

    def lines(self) -> list[str]:
        lines = [f"{self.entries} index entries, {self.objects} objects checked"]
        lines += [f"- {p}" for p in self.problems]
        lines += [f"- orphan object (no index entry uses it): {p}" for p in self.orphans]
        lines += [f"  note: {n}" for n in self.notes]
        return lines


def _ledger_registrations(ledgers: dict[str, Path]) -> dict[str, list[tuple[str, dict]]]:
    """{key: [(ring_id, record)]} of weights_registered / weights_quarantined records."""
    found: dict[str, list[tuple[str, dict]]] = {}
    for ring_id, ledger in ledgers.items():
        try:
            lines = ledger.read_text().splitlines()
        except FileNotFoundError:
            continue
        for raw in lines:
            try:
                record = json.loads(raw)
            except ValueError:
                continue
            if isinstance(record, dict) and record.get("kind") in (
                "weights_registered",
                "weights_quarantined",
            ):
                found.setdefault(record.get("key"), []).append((ring_id, record))
    return found


def check_store_index(store: WeightsStore, ledgers: dict[str, Path]) -> list[str]:
    """Where the index, the store's anchors and the ledgers disagree (without rehashing
    any object)."""
    report = StoreReport()
    entries = _read_entries(store, report)
    _compare_with_anchors(store, report, entries)
    _compare_with_ledgers(report, entries, ledgers)
    # Malformed entries are the store's own verify's to report; these are the anchors'.
    anchored = [d for d in report.damaged if d.anchored is not None]
    return [f"damaged: key {d.key} ({d.index}): {d.reason}" for d in anchored] + \
        report.ledger_problems  # fmt: skip


def _compare_with_anchors(store: WeightsStore, report: StoreReport, entries) -> None:
    """Each registration the anchors recorded has its entry, listing the same objects."""
    anchored, problems = store.anchors.registrations()
    report.ledger_problems += [f"store anchors: {p}" for p in problems]
    indexed = {entry["key"]: (path, entry) for path, entry in entries}
    damaged = {d.key for d in report.damaged}
    for path, entry in entries:
        registration = anchored.get(entry["key"])
        if entry["key"] in damaged:
            continue
        if registration is None:
            report.notes.append(f"key {entry['key']} has no registration in the store's "
                                "anchors (registered by an older ringflow)")  # fmt: skip
        elif not same_files(entry["files"], registration["files"]):
            listed = ", ".join(sorted(f["sha256"][:12] for f in registration["files"]))
            report.damaged.append(Damage(path, entry["key"], entry["tree"],
                                         "lists other objects than its registration anchored "
                                         f"({listed})", [], registration))  # fmt: skip
    for key, registration in sorted(anchored.items()):
        if key in indexed or any(d.key == key for d in report.damaged):
            continue
        tree = registration.get("tree")
        if not isinstance(tree, str) or not SHA256_PATTERN.fullmatch(tree):
            continue
        who = registration.get("who") or {}
        report.damaged.append(Damage(store.per_view / tree / f"{key}.json", key, tree,
                                     "index entry missing, though the store's anchors record "
                                     f"its registration (ring {who.get('ring')}, node "
                                     f"{who.get('node')})", [], registration))  # fmt: skip


def _read_entries(store: WeightsStore, report: StoreReport) -> list[tuple[Path, dict]]:
    """Well-formed index entries; malformed ones go to report.damaged."""
    entries: list[tuple[Path, dict]] = []
    for tree_dir in sorted(store.per_view.iterdir()):
        if not tree_dir.is_dir():
            report.unexpected.append(tree_dir)
            continue
        for index_path in sorted(tree_dir.glob("*.json")):
            try:
                entry = json.loads(index_path.read_bytes())
            except ValueError as exc:
                report.damaged.append(Damage(index_path, index_path.stem, tree_dir.name,
                                             f"malformed JSON ({exc})"))  # fmt: skip
                continue
            fault = _index_fault(entry, tree_dir.name, index_path.stem)
            if fault:
                report.damaged.append(Damage(index_path, index_path.stem, tree_dir.name, fault))
                continue
            entries.append((index_path, entry))
    return entries


def check_store(store: WeightsStore, ledgers: dict[str, Path] | None = None) -> StoreReport:
    """Everything wrong with a store; `ledgers` maps ring_id to the ledger it wrote."""
    report = StoreReport()
    entries = _read_entries(store, report)
    report.entries = len(entries) + len(report.damaged)
    report.leftovers = store.leftovers()
    used = {item["sha256"] for _, entry in entries for item in entry["files"]}
    present: dict[str, str] = {}
    for child in sorted(store.objects.iterdir()):
        if child.name.startswith(".incoming-"):
            continue
        if not SHA256_PATTERN.fullmatch(child.name) or child.is_symlink() or not child.is_file():
            report.unexpected.append(child)
            continue
        if child.name in used:
            present[child.name] = str(child)
        else:
            report.orphans.append(child)
    report.objects = len(present)
    hashes = hash_files(present.values()) if present else {}
    for index_path, entry in entries:
        faults, objects = [], []
        for item in entry["files"]:
            sha = item["sha256"]
            if sha not in present:
                faults.append(f"{item['path']}: object {sha} is missing")
                continue
            if hashes[present[sha]] != sha:
                faults.append(f"{item['path']}: object {sha} was altered "
                              f"(now hashes to {hashes[present[sha]]})")  # fmt: skip
                objects.append(sha)
            elif os.stat(present[sha]).st_size != item["size"]:
                faults.append(f"{item['path']}: object {sha} has another size than registered")
                objects.append(sha)
        if faults:
            report.damaged.append(Damage(index_path, entry["key"], entry["tree"],
                                         "; ".join(faults), objects))  # fmt: skip
    for damage in report.damaged:
        if damage.anchored is None:
            damage.anchored = store.anchors.registration(damage.key)
    _compare_with_anchors(store, report, entries)
    if ledgers is not None:
        _compare_with_ledgers(report, entries, ledgers)
    return report


def _compare_with_ledgers(report: StoreReport, entries, ledgers: dict[str, Path]) -> None:
    records = _ledger_registrations(ledgers)
    indexed = {entry["key"]: entry for _, entry in entries}
    for index_path, entry in entries:
        ring_id = entry["who"].get("ring")
        if ring_id not in ledgers:
            report.notes.append(f"key {entry['key']} was written by ring {ring_id!r}, "
                                "whose ledger is not among the rings compared")  # fmt: skip
            continue
        own = [r for ring, r in records.get(entry["key"], []) if ring == ring_id
               and r["kind"] == "weights_registered"]  # fmt: skip
        if not own:
            report.ledger_problems.append(
                f"index entry {index_path} (written by ring {ring_id}) has no "
                f"weights_registered record in that ring's ledger"
            )
            continue
        listed = sorted((f["path"], f["sha256"]) for f in entry["files"])
        if sorted((f["path"], f["sha256"]) for f in own[-1].get("files", [])) != listed:
            report.ledger_problems.append(
                f"index entry {index_path} lists other files than ring {ring_id}'s ledger "
                f"(line {own[-1].get('seq')})"
            )
    for key, found in sorted(records.items(), key=lambda item: str(item[0])):
        found = sorted(found, key=lambda pair: pair[1].get("ts", 0))
        last = found[-1][1]
        if last["kind"] == "weights_registered" and key not in indexed:
            if any(d.key == key for d in report.damaged):
                continue
            report.ledger_problems.append(
                f"key {key} is registered in ring {found[-1][0]}'s ledger (line {last.get('seq')})"
                " but the store has no index entry for it"
            )


def repair_store(
    store: WeightsStore,
    report: StoreReport,
    ledger=None,
    now: float | None = None,
    lock_wait_s: float = KEY_LOCK_WAIT_S,
) -> dict[str, Any]:
    """Quarantine the damaged entries and objects of `report`; remove the leftovers whose
    registration is gone (a live one holds an flock on its file: "in_use").

    Each entry is moved under its key's lock, so no execution is reading it meanwhile; a
    key whose lock stays busy is left for a later repair (listed in "busy"). Each
    quarantined key is recorded in `ledger` (a ring's Ledger) as weights_quarantined.
    """
    now = time.time() if now is None else now
    done: dict[str, Any] = {"quarantined": [], "restored": [], "retrain": [], "removed": [],
                            "in_use": [], "busy": []}  # fmt: skip
    if report.damaged:
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f"-{os.getpid()}"
        folder = store.root / "quarantine" / stamp
        (folder / "objects").mkdir(parents=True, exist_ok=True)
        moved: set[str] = set()
        for damage in report.damaged:
            target = folder / "per_view" / damage.tree / damage.index.name
            restorable = _restorable(store, damage)
            try:
                with _key_lock(store, damage.key, lock_wait_s):
                    target.parent.mkdir(parents=True, exist_ok=True)
                    if damage.index.exists():
                        os.replace(damage.index, target)
                    if restorable is not None:
                        _write_restored(store, damage, restorable)
                    elif damage.anchored is not None:
                        store.anchors.anchor_quarantine(damage.key, damage.reason)
            except DeadlineReached:
                done["busy"].append(damage.key)
                continue
            moved.add(str(damage.index))
            record = {"key": damage.key, "tree": damage.tree, "reason": damage.reason,
                      "objects": damage.objects,
                      "quarantine": str(target.relative_to(store.root))}  # fmt: skip
            if restorable is not None:
                done["restored"].append(record)
                if ledger is not None:
                    ledger.append("weights_restored", **record)
                continue
            done["quarantined"].append(record)
            who = (damage.anchored or {}).get("who") or {}
            if who:
                done["retrain"].append({"key": damage.key, **who})
            if ledger is not None:
                ledger.append("weights_quarantined", **record)
        # An object goes only once every entry that uses it went (its bytes are kept).
        for sha in sorted({sha for d in report.damaged for sha in d.objects}):
            users = [d for d in report.damaged if sha in d.objects]
            source = store.objects / sha
            if all(str(d.index) in moved for d in users) and source.exists():
                os.replace(source, folder / "objects" / sha)
        atomic_write_json(folder / "record.json", {"at": now, "entries": done["quarantined"]})
        fsync_dir(store.objects)
    for path in report.leftovers:
        removed = remove_if_owner_gone(path)
        if removed:
            done["removed"].append(str(path))
        elif removed is False:
            done["in_use"].append(str(path))
    return done


def _restorable(store: WeightsStore, damage: Damage) -> dict | None:
    """The entry the anchors say the key has, when every object it lists is intact."""
    registration = damage.anchored
    if registration is None or registration.get("tree") != damage.tree:
        return None
    files = []
    for item in registration.get("files") or []:
        obj = store.objects / str(item.get("sha256"))
        if obj.is_symlink() or not obj.is_file() or sha256_file(obj) != item["sha256"]:
            return None
        st = os.stat(obj)
        if st.st_size != item.get("size"):
            return None
        files.append({**item, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino})
    if not files:
        return None
    return {"key": damage.key, "tree": damage.tree, "files": files,
            "who": registration.get("who"), "registered_at": registration.get("ts"),
            "restored_at": time.time()}  # fmt: skip


def _write_restored(store: WeightsStore, damage: Damage, entry: dict) -> None:
    path = store.per_view / damage.tree / f"{damage.key}.json"
    path.unlink(missing_ok=True)
    atomic_write_json(path, entry, mode=OBJECT_MODE)


def _key_lock(store: WeightsStore, key: str, wait_s: float):
    if not SHA256_PATTERN.fullmatch(key):
        return nullcontext()  # a malformed entry's file name: no execution can use it
    give_up = time.monotonic() + wait_s
    return store.key_lock(key, should_stop=lambda: "busy" if time.monotonic() > give_up else None)


def missing_store(ring: Ring) -> str | None:
    """Why the ring's store cannot be checked (it is not where the lock recorded it: the
    ring was moved without it, or the store was removed), None where it is there."""
    if ring.store and Path(ring.store).is_dir():
        return None
    return (
        f"store {ring.store}: missing (the ring's weights were stored there when it was locked; "
        "a ring moved or copied without its store has no weights to check or replay)"
    )


def rings_of_store(ring: Ring) -> dict[str, Path]:
    """{ring_id: ledger} of the rings beside this one (same runs folder) and its ancestors
    that use the same store."""
    from ..core.seeds import chain_rings

    store = os.path.realpath(ring.store)
    found: dict[str, Path] = {}
    candidates = [Path(ring.ring_dir).parent.glob("*/RING.json")]
    for lock_files in candidates:
        for lock_file in sorted(lock_files):
            try:
                other = json.loads(lock_file.read_text())
            except ValueError:
                continue
            if os.path.realpath(other.get("store", "")) == store:
                found[other["ring_id"]] = RingLayout(lock_file.parent).ledger
    if ring.continue_from:
        previous = (Path(ring.ring_dir) / ring.continue_from).resolve()
        for ancestor in chain_rings(previous):
            if os.path.realpath(ancestor.store or "") == store:
                found.setdefault(ancestor.ring_id, RingLayout(Path(ancestor.ring_dir)).ledger)
    return found
