"""A locked ring as jobs see it: its RING.json and its clock (the live, moving deadlines).

Every job reads this, so it imports little; creating the lock lives in `lock.py`.
"""

from __future__ import annotations

import dataclasses
import os
import stat
import time
from pathlib import Path

from .errors import InputError
from .jsonio import read_json
from .layout import RingLayout, is_guard_variant, is_review_variant
from .node_state import Node, read_node
from .reserve import CutoffFile
from .reserve import settle_deadline as bounded_settle
from .state import Ring

# RING.json files parsed in this process, by path: (version, ring). A step reads its ring
# more than once (an execution, then its scoring), and the resident step server reads it
# before it forks, so that its forks find it parsed (docs/architecture.md#resident-steps).
_parsed: dict[str, tuple[tuple[int, ...], Ring]] = {}
# A file written again within one tick of the filesystem's clock can keep its mtime, so a
# version this recent is parsed but not remembered (as the file hashes' memo does).
_RACY_NS = 1_000_000_000


def load_ring(ring_dir: str | Path) -> Ring:
    """The ring locked in `ring_dir`. A folder copied or moved since its lock is read as
    the folder named: its own records, never the original's (which may be gone, or be
    another ring by now). Only reading follows a moved ring; every step and every command
    that writes refuses it (`refuse_moved_ring`)."""
    ring = _parse_locked(RingLayout(Path(ring_dir)).ring_json, ring_dir)
    if ring.ring_dir and not _same_folder(ring.ring_dir, ring_dir):
        return dataclasses.replace(ring, ring_dir=str(Path(ring_dir).resolve()))
    return ring


def _parse_locked(path: Path, ring_dir: str | Path) -> Ring:
    """RING.json parsed, once per version of the file (RING.json is written once, by
    the lock, and replaced whole where it ever is)."""
    try:
        st = os.stat(path)
    except OSError:
        st = None
    if st is None or not stat.S_ISREG(st.st_mode):
        raise InputError(f"{ring_dir}: not a ring folder (RING.json not found)")
    version = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    # By absolute path: the server reads ahead by its job's folder joined to the ring's
    # path, the step by the path as the rule gave it, often relative.
    key = os.path.abspath(path)
    known = _parsed.get(key)
    if known is not None and known[0] == version:
        return known[1]
    ring = Ring.from_record(read_json(path, what=str(path)), source=path)
    if time.time_ns() - st.st_mtime_ns > _RACY_NS:
        _parsed[key] = (version, ring)
    return ring


def _same_folder(recorded: str, ring_dir: str | Path) -> bool:
    try:
        return os.path.samefile(recorded, ring_dir)
    except OSError:
        return False


def refuse_moved_ring(ring_dir: str | Path) -> None:
    """A step writes where RING.json says the ring is: its records name the ring's folder,
    the store and the views' snapshots by absolute path. Run on a copy or a moved folder,
    it would write into the original, or fail half-way where the original is gone; so a
    ring runs where it was locked (docs/ring-folder.md#the-lock-and-the-clock). A folder
    not locked yet, or reached through another path to the same folder, passes."""
    path = RingLayout(Path(ring_dir)).ring_json
    if not path.is_file():
        return
    record = read_json(path, what=str(path))
    recorded = record.get("ring_dir") if isinstance(record, dict) else None
    if recorded and not _same_folder(recorded, ring_dir):
        raise InputError(
            f"{ring_dir}: this ring was locked at {recorded}, and its records name that folder "
            "(and the store and the views' snapshots) by absolute path, so its steps would "
            f"write there: run the ring from {recorded}, or start a new ring (a new ring_id) "
            "for this folder; a moved ring can still be read (status, summary, digest, report, "
            "verify, key, store check, export, package)"
        )


def load_node(ring: Ring, node_id: str) -> Node:
    return read_node(RingLayout(Path(ring.ring_dir)).node_json(node_id))


def current_cutoff(ring: Ring) -> float:
    """The live cutoff: it may have moved earlier since the ring started."""
    return CutoffFile(ring.layout.cutoff).cutoff()


def handover_at(ring: Ring) -> float:
    """The engineer's hand-over point: cutoff - node_tail_min, from the live cutoff."""
    return current_cutoff(ring) - ring.config.timeline.node_tail_min * 60


def final_deadline(ring: Ring) -> float:
    return ring.stop_at - ring.config.timeline.stop_margin_s


# Seed 0 and its ablation control are search work and end at the cutoff; promotion seeds
# and everything of final selection run in the final reserve, up to stop_at - margin.
SEARCH_PHASE_VARIANTS = ("s0", "s0-ablate")
# The stages of final selection in the order they run; each has its own deadline, computed
# backwards from stop_at (reserve.stage_deadlines), so a late stage keeps its share.
FINAL_STAGES = ("promotion", "review", "guard", "final")


def is_search_work(ring: Ring, view: str, variant: str) -> bool:
    return view != ring.final_view and variant in SEARCH_PHASE_VARIANTS


def stage_of(ring: Ring, view: str, variant: str) -> str:
    """Which stage an execution belongs to: search, one of FINAL_STAGES, or "diagnostic"
    (the reproduction check, after the decision)."""
    if view == ring.final_view:
        return "final"
    if variant in SEARCH_PHASE_VARIANTS:
        return "search"
    if variant in ("s1", "s2"):
        return "promotion"
    if is_review_variant(variant):
        return "review"
    if variant == "fresh-s0":
        # The reproduction check runs after the decision, in whatever time is left (up to
        # stop_at - stop_margin_s); no stage reserves time for it.
        return "diagnostic"
    if is_guard_variant(variant):
        return "guard"
    raise InputError(f"no stage for execution {view}/{variant}")


def stage_deadline(ring: Ring, stage: str) -> float:
    """The live deadline of a final-selection stage: the one the timekeeper last planned
    (cutoff.json "stages"), never later than stop_at - stop_margin_s."""
    end = final_deadline(ring)
    state = CutoffFile(ring.layout.cutoff).read()
    planned = (state.get("stages") or {}).get(stage, {}).get("deadline")
    return end if planned is None else min(end, float(planned))


def deadline_for(ring: Ring, view: str, variant: str):
    """A callable giving the current deadline of one execution (re-read at every call)."""
    if is_search_work(ring, view, variant):
        return lambda: current_cutoff(ring)
    stage = stage_of(ring, view, variant)
    return lambda: stage_deadline(ring, stage)


def settle_deadline(ring: Ring) -> float:
    """Search work in flight at the cutoff may still be scored until this moment
    (docs/operations.md#the-clock)."""
    timeline = ring.config.timeline
    return bounded_settle(
        current_cutoff(ring),
        ring.config.exec_health.term_grace_s,
        timeline.settle_extra_s,
        ring.stop_at,
        timeline.stop_margin_s,
    )


def scoring_deadline_for(ring: Ring, view: str, variant: str):
    """Scoring settles what ran: search work is scored until the end of the settle phase;
    the scoring of a final-selection execution belongs to its stage's share."""
    if is_search_work(ring, view, variant):
        return lambda: settle_deadline(ring)
    stage = stage_of(ring, view, variant)
    return lambda: stage_deadline(ring, stage)


def view_limits(ring: Ring, view: str) -> dict:
    """One view's limits (docs/operations.md#health-supervision): as locked in RING.json, `limits`
    with that view's `limits_per_view` entry laid over it."""
    locked = ring.views[view].limits if view in ring.views else None
    if locked is not None:
        return dict(locked)
    config = ring.config
    return {**config.limits.to_mapping(), **config.limits_per_view.get(view, {})}


def final_top_k(ring: Ring) -> int:
    """Finalists this ring tries: final_top_k, or the lower k the ring settled on before
    its first guard run because the capped reserve could not cover more (final_k.json)."""
    settled = RingLayout(Path(ring.ring_dir)).final_k
    if settled.exists():
        return int(read_json(settled, what=str(settled))["k"])
    return ring.config.final_top_k
