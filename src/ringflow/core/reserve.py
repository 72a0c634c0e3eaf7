"""Final reserve, measured (docs/operations.md#the-clock): price what final selection still needs,
move the cutoff.

Every minute (and at every step of final selection) the ring lists the executions final
selection still has, as they will run: batches of jobs that run side by side on the
execution slots the scheduler gives, one after another (`Batch`). Each job is priced from
measurements (`Price`, measured or assumed). `estimate` turns the batches into terms per
stage; `reserve_minutes` turns the total into a reserve; `next_cutoff` moves the persisted
cutoff earlier if the reserve grew (`CutoffFile`); `stage_deadlines` gives each stage of
final selection its own deadline, computed backwards from stop_at, so a late stage keeps
its share; `fit_final_k` lowers final_top_k when the capped reserve cannot cover it.
The cutoff only ever moves earlier, and the moved cutoff survives a restart.
"""

from __future__ import annotations

import copy
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import InputError
from .frozen import Frozen, frozen_record
from .jsonio import atomic_write_json, read_json

COLD_START_FACTOR = 1.5
LOCK_TIMEOUT_S = 60.0
MEASURED = "measured"
ASSUMED = "assumed"
# The stages of final selection in the order they run (ring.clock has the same tuple);
# "search" holds seed-0 checks of the finalists still pending, which end at the cutoff.
FINAL_STAGES = ("promotion", "review", "guard", "final")
STAGES = ("search", *FINAL_STAGES)


def _non_negative_int(value: Any, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")


def _non_negative_number(value: Any, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ValueError(f"{name} must be a non-negative number, got {value!r}")
    if math.isinf(value):
        raise ValueError(f"{name} must be finite, got {value!r}")


@frozen_record
class Price(Frozen):
    """Seconds one piece of work is expected to take, and where that number comes from.

    basis: "measured" (this node's own runs of the same kind on the same view, or the
    ring's own measured runs of the same command) or "assumed" (anything derived or
    configured: other views scaled by size, the training/replay ratio, a default).
    """

    seconds: float
    basis: str
    how: str

    def __post_init__(self) -> None:
        _non_negative_number(self.seconds, f"price of {self.how!r}")
        if self.basis not in (MEASURED, ASSUMED):
            raise ValueError(f"basis must be {MEASURED!r} or {ASSUMED!r}, got {self.basis!r}")


@frozen_record
class Job(Frozen):
    """One pending execution: its program, then its scoring (the same scheduler job)."""

    name: str
    program: Price
    scoring: Price


@frozen_record
class Batch(Frozen):
    """Jobs that run side by side on `slots` execution slots, then `after` (a review
    command) alone. Batches of a ring run one after another."""

    stage: str
    jobs: tuple[Job, ...]
    slots: int = 1
    after: Price | None = None
    label: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "jobs", tuple(self.jobs))
        if self.stage not in STAGES:
            raise ValueError(f"stage must be one of {', '.join(STAGES)}, got {self.stage!r}")
        if isinstance(self.slots, bool) or not isinstance(self.slots, int) or self.slots < 1:
            raise ValueError(f"slots must be an integer >= 1, got {self.slots!r}")


def parallel_seconds(durations: Iterable[float], slots: int) -> float:
    """Time for jobs run side by side on `slots` slots, each started as soon as one is free.

    Graham's bound for any such list schedule: sum / slots + (1 - 1/slots) * longest. It
    is the serial sum on one slot and never less than the longest job.
    """
    values = [float(d) for d in durations]
    for value in values:
        _non_negative_number(value, "duration")
    if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
        raise ValueError(f"slots must be an integer >= 1, got {slots!r}")
    if not values:
        return 0.0
    return math.fsum(values) / slots + (1 - 1 / slots) * max(values)


@dataclass
class Term:
    """One line of the estimate: seconds of one kind of work in one stage."""

    stage: str
    term: str
    seconds: float = 0.0
    measured: int = 0
    assumed: int = 0
    how: list[str] = field(default_factory=list)

    @property
    def basis(self) -> str:
        return ASSUMED if self.assumed else MEASURED

    def add(self, seconds: float, prices: Iterable[Price]) -> None:
        self.seconds += seconds
        for price in prices:
            if price.basis == MEASURED:
                self.measured += 1
            else:
                self.assumed += 1
            if price.how not in self.how:
                self.how.append(price.how)

    def to_dict(self) -> dict:
        return {
            "stage": self.stage,
            "term": self.term,
            "seconds": self.seconds,
            "basis": self.basis,
            "measured": self.measured,
            "assumed": self.assumed,
            "how": list(self.how),
        }


def estimate(batches: Iterable[Batch]) -> list[Term]:
    """The terms of the estimate, per stage: programs, scoring queue, review command.

    Programs and scoring each take their own side-by-side bound per batch (scoring runs
    in the execution's job, so its slots are the execution slots); batches add up.
    """
    terms: dict[tuple[str, str], Term] = {}

    def term(stage: str, name: str) -> Term:
        return terms.setdefault((stage, name), Term(stage, name))

    for batch in batches:
        if batch.jobs:
            programs = [job.program for job in batch.jobs]
            scoring = [job.scoring for job in batch.jobs]
            term(batch.stage, "programs").add(
                parallel_seconds([p.seconds for p in programs], batch.slots), programs
            )
            term(batch.stage, "scoring queue").add(
                parallel_seconds([p.seconds for p in scoring], batch.slots), scoring
            )
        if batch.after is not None:
            term(batch.stage, "review command").add(batch.after.seconds, [batch.after])
    order = {stage: i for i, stage in enumerate(STAGES)}
    return sorted(terms.values(), key=lambda t: order[t.stage])


def batch_record(batch: Batch) -> dict:
    """A batch as the reserve's snapshot keeps it: each job's name and its two prices
    (program, scoring), the slots and the review command's price."""
    return {
        "stage": batch.stage,
        "slots": batch.slots,
        "after_s": None if batch.after is None else batch.after.seconds,
        "jobs": {job.name: [job.program.seconds, job.scoring.seconds] for job in batch.jobs},
    }


def priced_for_what_ran(batches: Iterable[Mapping], ran: set[str]) -> dict[str, float]:
    """Per stage, what the snapshot's batches (`batch_record`) come to for the jobs named in
    `ran` only: the same side-by-side bounds as `estimate`, the review command counted
    where one of its batch's jobs ran. The reserve prices the worst case (every finalist
    reviewed and guarded); this is its price for the work that was done, so that how well
    it prices runs is told apart from the work it reserved for and never needed."""
    out = dict.fromkeys(STAGES, 0.0)
    for batch in batches:
        prices = [p for name, p in batch["jobs"].items() if name in ran]
        if not prices:
            continue
        slots = batch["slots"]
        out[batch["stage"]] += (
            parallel_seconds([program for program, _ in prices], slots)
            + parallel_seconds([scoring for _, scoring in prices], slots)
            + (batch.get("after_s") or 0.0)
        )
    return out


def stage_seconds(terms: Iterable[Term]) -> dict[str, float]:
    """Seconds per stage (every stage present, 0 when nothing is left)."""
    out = dict.fromkeys(STAGES, 0.0)
    for item in terms:
        out[item.stage] += item.seconds
    return out


def total_seconds(terms: Iterable[Term]) -> float:
    return math.fsum(item.seconds for item in terms)


def stage_deadlines(
    stop_at: float, stop_margin_s: float, shares: Mapping[str, float], pad_s: float = 0.0
) -> dict[str, dict[str, float]]:
    """Each final-selection stage's deadline, computed backwards from stop_at.

    The last stage (the final-view runs) ends at stop_at - stop_margin_s; every earlier
    stage ends where the stages after it begin their shares, so a stage that overruns is
    cut at its own deadline and never eats a later stage's time. A stage's share is its
    estimate plus its part of the reserve's pad (`pad_s`), in proportion to the estimate.
    """
    _non_negative_number(stop_margin_s, "stop_margin_s")
    _non_negative_number(pad_s, "pad_s")
    estimates = {stage: float(shares.get(stage, 0.0)) for stage in FINAL_STAGES}
    for stage, value in estimates.items():
        _non_negative_number(value, f"share of {stage}")
    total = math.fsum(estimates.values())
    scale = (total + pad_s) / total if total > 0 else 1.0
    end = float(stop_at) - stop_margin_s
    plan: dict[str, dict[str, float]] = {}
    for stage in reversed(FINAL_STAGES):
        share = estimates[stage] * scale
        plan[stage] = {"estimate_s": estimates[stage], "share_s": share, "deadline": end}
        end -= share
    return {stage: plan[stage] for stage in FINAL_STAGES}


def fit_final_k(
    estimate_for_k: Callable[[int], float], configured_k: int, pad_min: float, cap_min: float
) -> tuple[int, list[dict]]:
    """The largest k <= configured_k whose estimate plus the pad fits in the capped reserve.

    k never goes below 1: one finalist is tried even when it does not fit (an incomplete
    guard then keeps the baseline, as docs/operations.md#final-selection says). Returns (k, the
    priced table).
    """
    if isinstance(configured_k, bool) or not isinstance(configured_k, int) or configured_k < 1:
        raise ValueError(f"final_top_k must be an integer >= 1, got {configured_k!r}")
    _non_negative_number(pad_min, "reserve pad")
    _non_negative_number(cap_min, "reserve cap")
    table = []
    for k in range(configured_k, 0, -1):
        seconds = estimate_for_k(k)
        fits = seconds / 60.0 + pad_min <= cap_min
        table.append({"k": k, "estimate_s": seconds, "fits": fits})
        if fits:
            return k, table
    return 1, table


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
    reserve is capped at half the wall clock (docs/operations.md#the-clock), and enforcing the cap
    here as well means no reserve, however computed, can put the cutoff before the midpoint, let
    alone before the start. A cutoff already earlier than the candidate (for example a configured
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

    def note_estimate(self, *, reserve_min: float, estimate_s: float, **plan: Any) -> None:
        """Record the latest estimate without moving the cutoff (status shows it); `plan`
        (the stage deadlines, the breakdown) replaces those keys of the state."""
        with _file_lock(str(self.path) + ".lock", timeout=LOCK_TIMEOUT_S):
            state = self.read()
            state.update(plan)
            state.update(reserve_min=reserve_min, estimate_s=estimate_s, estimated_at=time.time())
            atomic_write_json(self.path, state)
