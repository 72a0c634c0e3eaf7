"""A locked ring as jobs see it: its RING.json and its clock (the live, moving deadlines).

Every job reads this, so it imports little; creating the lock lives in `lock.py`.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from ..jsonio import read_json
from ..reserve import CutoffFile
from ..reserve import settle_deadline as bounded_settle
from .layout import RingLayout


def load_ring(ring_dir: str | Path) -> dict:
    path = Path(ring_dir) / "RING.json"
    if not path.is_file():
        raise InputError(f"{ring_dir}: not a ring folder (RING.json not found)")
    return read_json(path, what=str(path))


def load_node(ring: dict, node_id: str) -> dict:
    return read_json(RingLayout(Path(ring["ring_dir"])).node_json(node_id))


def current_cutoff(ring: dict) -> float:
    """The live cutoff: it may have moved earlier since the ring started."""
    return CutoffFile(RingLayout(Path(ring["ring_dir"])).cutoff).cutoff()


def final_deadline(ring: dict) -> float:
    return ring["stop_at"] - ring["config"]["timeline"]["stop_margin_s"]


# Seed 0 and its ablation control are search work and end at the cutoff; promotion seeds
# and everything of final selection run in the final reserve, up to stop_at - margin.
SEARCH_PHASE_VARIANTS = ("s0", "s0-ablate")


def is_search_work(ring: dict, view: str, variant: str) -> bool:
    return view != ring["final_view"] and variant in SEARCH_PHASE_VARIANTS


def deadline_for(ring: dict, view: str, variant: str):
    """A callable giving the current deadline of one execution (re-read at every call)."""
    if is_search_work(ring, view, variant):
        return lambda: current_cutoff(ring)
    return lambda: final_deadline(ring)


def settle_deadline(ring: dict) -> float:
    """Search work in flight at the cutoff may still be scored until this moment (SPEC 9)."""
    timeline = ring["config"]["timeline"]
    return bounded_settle(
        current_cutoff(ring),
        ring["config"]["exec_health"]["term_grace_s"],
        timeline["settle_extra_s"],
        ring["stop_at"],
        timeline["stop_margin_s"],
    )


def scoring_deadline_for(ring: dict, view: str, variant: str):
    """Scoring settles what ran: search work is scored until the end of the settle phase."""
    if is_search_work(ring, view, variant):
        return lambda: settle_deadline(ring)
    return lambda: final_deadline(ring)
