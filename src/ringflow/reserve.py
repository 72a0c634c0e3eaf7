"""Final reserve, measured (SPEC 9): estimate what final selection needs, move the cutoff.

Every minute the ring describes the work final selection still has for its top
`final_top_k` candidates (a FinalWorkload), prices it with measured execution
times (estimate_final_seconds), turns that into a reserve (reserve_minutes), and
moves the persisted cutoff earlier if the reserve grew (next_cutoff, CutoffFile).
The cutoff only ever moves earlier, and the moved cutoff survives a restart.
"""

from __future__ import annotations

import copy
import math
import os
import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import InputError
from .jsonio import atomic_write_json, read_json

COLD_START_FACTOR = 1.5
LOCK_TIMEOUT_S = 60.0


def _non_negative_int(value: Any, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")


def _non_negative_number(value: Any, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ValueError(f"{name} must be a non-negative number, got {value!r}")
    if math.isinf(value):
        raise ValueError(f"{name} must be finite, got {value!r}")


@dataclass(frozen=True)
class FinalistWork:
    """What one of the top final_top_k candidates still needs before final selection ends.

    view_checks_pending: seed-0 executions on search views not yet done (one view each).
    reviews_pending: review executions not yet done (view-blind runs and re-checks, one view
        each, in fresh mode).
    promotion_seeds_missing: promotion seeds (1 and 2) not yet run (all search views each).
    guard_seeds_pending: guard seeds not yet run (all search views each); None means every
        one of the workload's guard seeds.
    """

    node: str
    view_checks_pending: int = 0
    reviews_pending: int = 0
    promotion_seeds_missing: int = 0
    guard_seeds_pending: int | None = None

    def __post_init__(self) -> None:
        _non_negative_int(self.view_checks_pending, "view_checks_pending")
        _non_negative_int(self.reviews_pending, "reviews_pending")
        _non_negative_int(self.promotion_seeds_missing, "promotion_seeds_missing")
        if self.promotion_seeds_missing > 2:
            raise ValueError(
                f"promotion_seeds_missing is at most 2 (seeds 1 and 2), "
                f"got {self.promotion_seeds_missing}"
            )
        if self.guard_seeds_pending is not None:
            _non_negative_int(self.guard_seeds_pending, "guard_seeds_pending")


@dataclass(frozen=True)
class FinalWorkload:
    """The work final selection still has, as counts; prices come from measurements.

    finalists: the top final_top_k candidates, in rank order.
    search_views: how many search views a seed runs on.
    guard_seeds: guard seeds per side (the ring's guard_seeds; 0 when the guard is off).
    scoring_queue_s: time an execution waits for its scorer, added once per execution.
    cold_start_factor: price of a fresh run relative to a measured one (SPEC 9: 1.5).
    has_baseline: whether a baseline exists (its guard and final run are counted).
    baseline_guard_seeds_pending: None means every guard seed.
    baseline_final_pending: the baseline's run on the final view is not yet done.
    cold_start_pending: the chosen program's cold start on the final view is not yet done.
    """

    finalists: tuple[FinalistWork, ...]
    search_views: int
    guard_seeds: int
    scoring_queue_s: float = 0.0
    cold_start_factor: float = COLD_START_FACTOR
    has_baseline: bool = True
    baseline_guard_seeds_pending: int | None = None
    baseline_final_pending: bool = True
    cold_start_pending: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "finalists", tuple(self.finalists))
        _non_negative_int(self.search_views, "search_views")
        if self.search_views < 1:
            raise ValueError("search_views must be >= 1 (search views are all views but final)")
        _non_negative_int(self.guard_seeds, "guard_seeds")
        _non_negative_number(self.scoring_queue_s, "scoring_queue_s")
        _non_negative_number(self.cold_start_factor, "cold_start_factor")
        if self.baseline_guard_seeds_pending is not None:
            _non_negative_int(self.baseline_guard_seeds_pending, "baseline_guard_seeds_pending")
        for finalist in self.finalists:
            if not isinstance(finalist, FinalistWork):
                raise ValueError(f"finalists must be FinalistWork entries, got {finalist!r}")


def default_seed_seconds(measured: Mapping) -> float:
    """Price of one seed for a node nobody has measured yet.

    An explicit "default_s" wins; otherwise the median of every measured node (and the
    baseline); with nothing measured, the configured "fallback_s".
    """
    explicit = measured.get("default_s")
    if explicit is not None:
        _non_negative_number(explicit, "measured default_s")
        return float(explicit)
    values = [float(v) for v in measured.get("nodes", {}).values() if v is not None]
    if measured.get("baseline") is not None:
        values.append(float(measured["baseline"]))
    if values:
        return statistics.median(values)
    fallback = measured.get("fallback_s")
    if fallback is None:
        raise InputError(
            "final reserve: no execution has been measured and no fallback_s is configured"
        )
    _non_negative_number(fallback, "measured fallback_s")
    return float(fallback)


def estimate_breakdown(workload: FinalWorkload, measured: Mapping) -> dict[str, float]:
    """Seconds per term of the final-selection estimate (a serial sum, SPEC 9).

    `measured` holds, per node, the seconds one seed takes: execution times summed over
    the search views plus scoring time ("nodes": {node: s}, "baseline": s or None), and
    how to price unmeasured nodes ("default_s", else median, else "fallback_s"). One view
    of a node costs its seed time divided by the number of search views.

    Terms:
      view_checks  - each pending seed-0 view execution, one view each;
      reviews      - each pending review execution: one view in fresh mode, so priced
                     with the cold-start factor;
      promotion    - each missing promotion seed, all search views;
      guard        - worst case, every finalist's pending guard seeds (none passes
                     early) plus the baseline's, all search views each;
      cold_start   - the chosen program's fresh run on the final view; the winner is not
                     known yet, so the slowest finalist, times the cold-start factor;
      baseline_final - the baseline's run on the final view, one view;
      scoring_queue - scoring_queue_s once for every execution counted above.
    """
    nodes = measured.get("nodes", {})
    default = None

    def seed_s(node: str | None) -> float:
        nonlocal default
        value = measured.get("baseline") if node is None else nodes.get(node)
        if value is None:
            if default is None:
                default = default_seed_seconds(measured)
            return default
        _non_negative_number(value, f"measured seconds of {node or 'baseline'}")
        return float(value)

    views = workload.search_views
    terms = dict.fromkeys(
        (
            "view_checks",
            "reviews",
            "promotion",
            "guard",
            "cold_start",
            "baseline_final",
            "scoring_queue",
        ),
        0.0,
    )
    executions = 0
    slowest_view_s = 0.0
    for finalist in workload.finalists:
        per_seed = seed_s(finalist.node)
        per_view = per_seed / views
        slowest_view_s = max(slowest_view_s, per_view)
        guard = (
            workload.guard_seeds
            if finalist.guard_seeds_pending is None
            else finalist.guard_seeds_pending
        )
        terms["view_checks"] += finalist.view_checks_pending * per_view
        terms["reviews"] += finalist.reviews_pending * per_view * workload.cold_start_factor
        terms["promotion"] += finalist.promotion_seeds_missing * per_seed
        terms["guard"] += guard * per_seed
        executions += (
            finalist.view_checks_pending
            + finalist.reviews_pending
            + (finalist.promotion_seeds_missing + guard) * views
        )
    if workload.has_baseline:
        baseline_seed = seed_s(None)
        guard = (
            workload.guard_seeds
            if workload.baseline_guard_seeds_pending is None
            else workload.baseline_guard_seeds_pending
        )
        terms["guard"] += guard * baseline_seed
        executions += guard * views
        if workload.baseline_final_pending:
            terms["baseline_final"] = baseline_seed / views
            executions += 1
    if workload.cold_start_pending and workload.finalists:
        terms["cold_start"] = slowest_view_s * workload.cold_start_factor
        executions += 1
    terms["scoring_queue"] = executions * workload.scoring_queue_s
    return terms


def estimate_final_seconds(workload: FinalWorkload, measured: Mapping) -> float:
    """Seconds final selection still needs: the serial sum of estimate_breakdown's terms."""
    return math.fsum(estimate_breakdown(workload, measured).values())


def reserve_minutes(
    configured_min: float, estimate_s: float, pad_min: float, ring_wall_min: float
) -> float:
    """reserve = max(configured, estimate + pad), capped at half the ring's wall clock."""
    for value, name in (
        (configured_min, "configured reserve"),
        (estimate_s, "estimate"),
        (pad_min, "reserve pad"),
        (ring_wall_min, "ring wall clock"),
    ):
        _non_negative_number(value, name)
    return min(max(configured_min, estimate_s / 60.0 + pad_min), ring_wall_min / 2.0)


def next_cutoff(current_cutoff: float, stop_at: float, start: float, reserve_min: float) -> float:
    """The cutoff after applying a reserve: stop_at - reserve, but only ever earlier.

    The candidate is clamped to the ring's midpoint, start + (stop_at - start) / 2: the
    reserve is capped at half the wall clock (SPEC 9), and enforcing the cap here as well
    means no reserve, however computed, can put the cutoff before the midpoint, let alone
    before the start. A cutoff already earlier than the candidate (for example a configured
    final_reserve_min above half the wall clock) is kept as it is.
    """
    if not stop_at > start:
        raise ValueError(f"stop_at ({stop_at}) must be after start ({start})")
    _non_negative_number(reserve_min, "reserve")
    midpoint = start + (stop_at - start) / 2.0
    candidate = max(stop_at - reserve_min * 60.0, midpoint)
    return min(current_cutoff, candidate)


def settle_deadline(
    cutoff: float, grace_s: float, settle_extra_s: float, stop_at: float, stop_margin_s: float
) -> float:
    """End of the settle phase: cutoff + grace + settle_extra_s, never later than
    stop_at - stop_margin_s, and never before the cutoff (which wins if they conflict)."""
    _non_negative_number(grace_s, "grace_s")
    _non_negative_number(settle_extra_s, "settle_extra_s")
    _non_negative_number(stop_margin_s, "stop_margin_s")
    bounded = min(cutoff + grace_s + settle_extra_s, stop_at - stop_margin_s)
    return max(bounded, cutoff)


def _file_lock(path: str, **kwargs):
    # Imported here: every job reads the cutoff, few ever move it.
    from filelock import FileLock

    return FileLock(path, **kwargs)


class CutoffFile:
    """The ring's live cutoff, persisted; supervisors re-read it as the deadline.

    Content: {"cutoff": epoch s, "reserve_min", "estimate_s", "updated_at", "history": [...]}.
    Writers take a file lock and replace the file atomically, so a reader never sees a
    half-written file; read() re-parses only when the file was replaced.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._cache_key: tuple[int, int, int] | None = None
        self._cache: dict | None = None

    def exists(self) -> bool:
        return self.path.exists()

    def read(self) -> dict:
        """The persisted state; a missing or malformed file raises InputError."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise InputError(f"cutoff file {self.path}: file not found") from None
        # An atomic replace always brings a new inode, so this key changes on every write.
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        if key != self._cache_key or self._cache is None:
            state = read_json(self.path, f"cutoff file {self.path}")
            cutoff = state.get("cutoff") if isinstance(state, dict) else None
            if isinstance(cutoff, bool) or not isinstance(cutoff, int | float):
                raise InputError(f"cutoff file {self.path}: 'cutoff' must be a number")
            self._cache, self._cache_key = state, key
        return copy.deepcopy(self._cache)

    def cutoff(self) -> float:
        """The live cutoff (epoch seconds)."""
        return float(self.read()["cutoff"])

    def ensure(
        self, initial_cutoff: float, *, reserve_min: float, estimate_s: float | None = None
    ) -> dict:
        """Create the file with the initial cutoff unless it exists (a resumed ring keeps its
        persisted cutoff); returns the state."""
        with _file_lock(str(self.path) + ".lock", timeout=LOCK_TIMEOUT_S):
            if self.path.exists():
                return self.read()
            now = time.time()
            state = {
                "cutoff": float(initial_cutoff),
                "reserve_min": reserve_min,
                "estimate_s": estimate_s,
                "updated_at": now,
                "history": [{"cutoff": float(initial_cutoff), "at": now, "initial": True}],
            }
            atomic_write_json(self.path, state)
            return copy.deepcopy(state)

    def move_earlier(self, new_cutoff: float, **why: Any) -> bool:
        """Persist an earlier cutoff; refuse (False, nothing written) one that is not earlier.

        `why` is recorded in the history entry; its reserve_min and estimate_s, if given,
        also become the current values.
        """
        if not math.isfinite(new_cutoff):
            raise ValueError(f"cutoff must be a finite epoch time, got {new_cutoff!r}")
        with _file_lock(str(self.path) + ".lock", timeout=LOCK_TIMEOUT_S):
            state = self.read()
            previous = float(state["cutoff"])
            if not new_cutoff < previous:
                return False
            now = time.time()
            state["history"] = [
                *state.get("history", []),
                {**why, "cutoff": float(new_cutoff), "previous": previous, "at": now},
            ]
            state["cutoff"] = float(new_cutoff)
            state["updated_at"] = now
            for key in ("reserve_min", "estimate_s"):
                if key in why:
                    state[key] = why[key]
            atomic_write_json(self.path, state)
            return True

    def note_estimate(self, *, reserve_min: float, estimate_s: float) -> None:
        """Record the latest estimate without moving the cutoff (status shows it)."""
        with _file_lock(str(self.path) + ".lock", timeout=LOCK_TIMEOUT_S):
            state = self.read()
            state.update(reserve_min=reserve_min, estimate_s=estimate_s, estimated_at=time.time())
            atomic_write_json(self.path, state)
