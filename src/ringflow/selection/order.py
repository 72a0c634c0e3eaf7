"""The order of final selection, once: which baseline can be seated, which verdict ends
selection and what is chosen. Pure functions of the selection records, shared by the
workflow (what to schedule next), the decision step and the timekeeper (what is left).
"""

from __future__ import annotations

from ..core import statuses
from ..core.state import Ring


def usable_baseline(index: dict) -> str | None:
    """The baseline node, if it is ready (a rejected baseline cannot be seated)."""
    base = index.get("baseline")
    ready = {n["id"] for n in index["nodes"] if n["status"] == statuses.READY}
    return base if base in ready else None


# A review whose runs the clock cut (docs/guard.md#cut-is-not-failed).
NOT_REVIEWED = "not_reviewed"


def ends_selection(verdict: dict) -> bool:
    """A replacement ends final selection, and so does running out of time (an incomplete
    guard, a review cut by the clock): the baseline stays, and no other finalist is tried
    in its place to save time (docs/guard.md#cut-is-not-failed)."""
    if verdict.get("replace") or (verdict.get("outcome") == NOT_REVIEWED and verdict.get("cut")):
        return True
    guard = verdict.get("guard") or {}
    return bool(verdict.get("eligible")) and not guard.get("complete")


def choose(ring: Ring, seated: dict, ranking: dict, verdicts: list[dict]):
    """(chosen node or None, reason, the verdict that chose it or None). What stays when
    no finalist replaces it is the seated side: the chain's incumbent, or the baseline
    (docs/guard.md#the-incumbent)."""
    base = seated.get("reference", seated["baseline"])
    side = seated.get("guard_against") or "baseline"
    top = ranking["finalists"][0] if ranking["finalists"] else None
    if base is None:
        return top, "no baseline and guard disabled: the top finalist by 3-seed mean", None
    if not ring.config.guard.enabled:
        if top is None:
            return base, f"guard disabled and no finalist: {side} kept", None
        return top, "guard disabled: the top finalist by 3-seed mean (no protection)", None
    for item in verdicts:
        if item["replace"]:
            return item["node"], item["reason"], item
    if not verdicts:
        return base, f"{side} kept: no finalist", None
    return (
        base,
        f"{side} kept: " + "; ".join(f"{v['node']}: {v['reason']}" for v in verdicts),
        None,
    )
