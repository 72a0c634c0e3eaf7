"""Import of sealed work into a ring that continues a chain (docs/operations.md#carryover).

Every seal recorded in the ledger of a ring of the chain (the parent first) whose work has
not been resumed yet (a `carryover_sealed` line: evidence seals, `evidence_sealed`, are
never imported) is checked before anything is copied: its ledger line's own hash, the
sha256 of SEAL.json against that line, the lock it was sealed under, and every file of the
snapshot against SEAL.json (changed, missing, added, a link instead of a file), and the
sealing ring's whole ledger against the anchors in its folder and in its store. The copy
into `carryover/imported/<ring>--<node>/` is hashed again as it is written and renamed into
place whole. Work that fails any check is `carryover_rejected` with the reason and nothing
of it is copied; the rest is imported. The verified work is the resume queue: oldest seal
first, at most `max_resume_per_ring`, each claimed in the store's registry. The parent's
scored work is taken in the same checkpoint (scored.py).
"""

from __future__ import annotations

import json
import secrets
import shutil
from pathlib import Path

from ..core.clock import load_ring
from ..core.errors import RingflowError
from ..core.jsonio import atomic_write_json, fsync_dir, fsync_tree, read_json
from ..core.layout import RingLayout
from ..core.ledger import Ledger, emit_event, record_hash
from ..core.records import RingEvidence
from ..core.seeds import chain_rings
from ..core.state import Ring
from .engineer import KIND as ENGINEER_KIND
from .engineer import parent_ring_dir, segment_details
from .registry import ResumeRegistry, is_ours
from .scored import import_scored
from .seal import HANDOFF_FILE, SEAL_FILE, lock_sha256, seal_problems, sealed_records
from .snapshot import copy_hashing, file_sha256, safe_relpath

IMPORTED = "carryover/imported.json"


class Rejected(Exception):
    """A seal that fails a check: the reason names what and where."""


def _check_seal(ancestor: Path, record: dict, evidence: RingEvidence) -> tuple[Path, dict]:
    """The snapshot folder and its SEAL.json, once every check passes; else Rejected."""
    if record.get("hash") != record_hash(record):
        raise Rejected(f"its ledger line {record.get('seq')} in {ancestor / 'ledger.jsonl'} does "
                       "not match its own hash (the line was edited)")  # fmt: skip
    # A seal counts only in a ledger the store vouches for: one rebuilt by an editor of
    # the ring folder, re-chained and re-headed, does not verify (docs/integrity.md).
    untrusted = evidence.untrusted()
    if untrusted is not None:
        raise Rejected(untrusted)
    snapshot = RingLayout(ancestor).node_dir(str(record.get("node"))) / "carryover"
    if snapshot.is_symlink() or not snapshot.is_dir():
        raise Rejected(f"{snapshot}: the snapshot folder is missing")
    seal_path = snapshot / SEAL_FILE
    if seal_path.is_symlink() or not seal_path.is_file():
        raise Rejected(f"{seal_path}: missing or not a regular file")
    digest, _ = file_sha256(seal_path)
    if digest != record.get("seal_sha256"):
        raise Rejected(f"{seal_path}: its sha256 {digest[:12]} is not the one the ledger records "
                       f"(line {record.get('seq')}: {str(record.get('seal_sha256'))[:12]}): "
                       "SEAL.json was edited")  # fmt: skip
    try:
        seal = read_json(seal_path)
        for item in seal["files"]:
            safe_relpath(item["path"])
    except (RingflowError, KeyError, TypeError) as exc:
        raise Rejected(f"{seal_path}: not a seal ({exc})") from None
    if seal.get("identity") != record.get("identity"):
        raise Rejected(f"{seal_path}: seals {seal.get('identity')}, the ledger says "
                       f"{record.get('identity')}")  # fmt: skip
    if seal.get("lock_sha256") != lock_sha256(ancestor):
        raise Rejected(f"{seal_path}: sealed under another lock than {ancestor / 'RING.json'}")
    problems = seal_problems(snapshot, seal)
    if problems:
        raise Rejected(f"{snapshot}: {len(problems)} file(s) differ from SEAL.json: "
                       + "; ".join(problems[:4]))  # fmt: skip
    return snapshot, seal


def _copy_verified(snapshot: Path, seal: dict, dest: Path) -> None:
    """Copy the sealed files (and SEAL.json) to dest, checking each byte copied; whole or
    nothing."""
    if dest.is_dir() and not seal_problems(dest, seal):
        return  # imported already (the import ran again)
    staging = dest.parent / f".{dest.name}.{secrets.token_hex(6)}"
    staging.mkdir(parents=True)
    try:
        for item in seal["files"]:
            digest, size = copy_hashing(snapshot / item["path"], staging / item["path"])
            if (digest, size) != (item["sha256"], item["size"]):
                raise Rejected(f"{snapshot / item['path']}: changed while it was copied")
        copy_hashing(snapshot / SEAL_FILE, staging / SEAL_FILE)
        fsync_tree(staging)
        if dest.exists():
            shutil.rmtree(dest)
        staging.rename(dest)
        fsync_dir(dest.parent)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _segment(ancestor: Ring, record: dict, seal: dict, snapshot: Path, copy: Path) -> dict:
    return {
        "ring": ancestor.ring_id,
        "ring_dir": ancestor.ring_dir,
        "node": record["node"],
        "kind": seal["kind"],
        "lock_sha256": seal["lock_sha256"],
        "seal_sha256": record["seal_sha256"],
        "ledger_seq": record["seq"],
        "sealed_at": record["ts"],
        "snapshot": str(snapshot),
        "imported_to": str(copy),
        "trajectory": None,
        "quota": None,
    }


def _failed_parent_review(ring_dir: Path, parent: object) -> str | None:
    """Why work whose parent failed its review in the sealing ring is refused
    (docs/operations.md#carryover)."""
    if not isinstance(parent, str) or not parent:
        return None
    review = RingLayout(ring_dir).review(parent)
    if not review.is_file():
        return None
    record = read_json(review)
    # Not reviewed (time ran out, or too costly to confirm) is not a failed review.
    if record.get("passed", True) or record.get("outcome") == "not_reviewed":
        return None
    reasons = "; ".join(record.get("reasons") or []) or "no reason recorded"
    return f"its parent {parent} failed review in {ring_dir}: {reasons}"


def _logged(ledger_path: Path) -> set[tuple[str, str]]:
    """(kind, identity) of the import records this ring's ledger already has."""
    found = set()
    for line in ledger_path.read_bytes().splitlines() if ledger_path.exists() else []:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("kind") in ("carryover_imported", "carryover_rejected", "resume_refused"):
            found.add((record["kind"], record.get("identity")))
    return found


def import_carryover(ring_dir: str | Path) -> dict:
    """Verify and copy the chain's sealed work; choose the resume queue; write imported.json."""
    ring = load_ring(ring_dir)
    layout = RingLayout(Path(ring.ring_dir))
    out = {"imported": [], "rejected": [], "refused": [], "already_resumed": [], "queue": [],
           "waiting": []}  # fmt: skip
    if ring.continue_from:
        previous = (layout.root / ring.continue_from).resolve()
        _import_chain(ring, layout, chain_rings(previous), out)
        # Scored nodes, promotion scores, refuted directions, rescoring obligations and the
        # store index: from the parent, which has imported its own parent's
        # (docs/operations.md#chains).
        import_scored(ring, layout, previous, out)
    atomic_write_json(layout.root / IMPORTED, out)
    return out


def _import_chain(ring: Ring, layout: RingLayout, chain: list[dict], out: dict) -> None:
    registry = ResumeRegistry(ring.store)
    ledger = Ledger(layout.ledger)
    logged = _logged(layout.ledger)
    target = layout.root / "carryover" / "imported"
    for ancestor in chain:
        root = Path(ancestor.ring_dir)
        evidence = RingEvidence(root)
        for node, record in sorted(sealed_records(RingLayout(root).ledger).items(),
                                   key=lambda item: item[1].get("seq", 0)):  # fmt: skip
            ident = str(record.get("identity") or f"{ancestor.ring_id}#{node}")
            claim = registry.claimed_by(ident, lock_sha256(root))
            if claim is not None and not is_ours(claim, ring):
                out["already_resumed"].append({"identity": ident, "by": claim["ring_id"],
                                               "by_dir": claim["ring_dir"]})  # fmt: skip
                continue
            copy = target / f"{ancestor.ring_id}--{node}"
            try:
                snapshot, seal = _check_seal(root, record, evidence)
                _copy_verified(snapshot, seal, copy)
            except Rejected as exc:
                reason = str(exc)
                out["rejected"].append({"identity": ident, "ring_dir": str(root), "node": node,
                                        "reason": reason})  # fmt: skip
                if ("carryover_rejected", ident) not in logged:
                    ledger.append("carryover_rejected", identity=ident, reason=reason)
                emit_event(layout.root, "carryover_rejected", identity=ident, reason=reason)
                continue
            handoff = read_json(copy / HANDOFF_FILE)
            refused = _failed_parent_review(parent_ring_dir(root, handoff), handoff.get("parent"))
            if refused is not None:
                out["refused"].append({"identity": ident, "reason": refused})
                if ("resume_refused", ident) not in logged:
                    ledger.append("resume_refused", identity=ident, reason=refused)
                emit_event(layout.root, "resume_refused", identity=ident, reason=refused)
                continue
            segments = [*(handoff.get("segments") or []),
                        {**_segment(ancestor, record, seal, snapshot, copy),
                         **segment_details(handoff, snapshot)}]  # fmt: skip
            out["imported"].append({
                "identity": ident,
                "kind": seal["kind"],
                "ring_id": ancestor.ring_id,
                "node": node,
                "name": handoff.get("name") or node,
                "seal_sha256": record["seal_sha256"],
                "sealed_at": record["ts"],
                "copy": str(copy.relative_to(layout.root)),
                "parent": handoff.get("parent"),
                "segments": segments,
            })  # fmt: skip
            if ("carryover_imported", ident) not in logged:
                ledger.append("carryover_imported", identity=ident,
                              seal_sha256=record["seal_sha256"])  # fmt: skip
    _choose_queue(ring, registry, out)


def _choose_queue(ring: Ring, registry: ResumeRegistry, out: dict) -> None:
    """Oldest seal first, at most max_resume_per_ring, each claimed for this ring."""
    limit = ring.config.max_resume_per_ring
    for item in sorted(out["imported"], key=lambda i: (i["sealed_at"], i["identity"])):
        if item["kind"] == ENGINEER_KIND and not ring.config.engineer.command:
            # Only an engineer session resumes engineer work: it waits for a ring with one.
            out["waiting"].append(item["identity"])
            continue
        if len(out["queue"]) >= limit:
            out["waiting"].append(item["identity"])
            continue
        claim = registry.claim(item["identity"], item["segments"][-1]["lock_sha256"], ring)
        if is_ours(claim, ring):
            out["queue"].append(item["identity"])
        else:  # a sibling ring claimed it between our check and now
            out["already_resumed"].append({"identity": item["identity"], "by": claim["ring_id"],
                                           "by_dir": claim["ring_dir"]})  # fmt: skip
