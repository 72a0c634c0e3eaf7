"""The measured final reserve, kept up to date while a ring runs (docs/operations.md#the-clock).

The ring lists what final selection still has to run, as it will run (`Planner`), prices
every execution from what was measured so far (`Measurements`), and from that estimate
moves the persisted cutoff earlier if the reserve grew, gives each stage of final
selection its deadline, and records how good the estimate was (`stage_timing`). It runs
as a daemon thread of the Snakemake process that drives the ring, once a minute and at
every step of final selection; `ringflow reserve RING_DIR` runs one tick by hand.
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from statistics import fmean

from filelock import FileLock

from ..carryover.scores import imported_score
from ..cluster.jobs import job_overhead_s, query_job_times
from ..core import reserve, statuses
from ..core.clock import FINAL_STAGES, load_ring, stage_of, view_limits
from ..core.jsonio import atomic_write_json, read_json
from ..core.layout import RingLayout, is_guard_variant
from ..core.ledger import Ledger, emit_event
from ..core.node_state import ExecutionResult, Node, read_node, read_result
from ..core.reserve import ASSUMED, MEASURED, Batch, Job, Price
from ..core.state import Ring
from ..scoring import bootstrap_calls, scorer_mode
from .incumbent import reference
from .order import ends_selection, usable_baseline
from .scores import candidate_ids, node_mean, rank_key

TICK_S = 60.0
WATCH_S = 1.0
# Prices of work nothing comparable has been measured for (marked assumed).
FALLBACK_EXECUTION_S = 60.0
FALLBACK_SCORING_S = 10.0
ASSUMED_TRAIN_REPLAY_RATIO = 5.0
TRAIN, REPLAY, NONE = "train", "replay", "none"


# ---- what the scheduler gives ------------------------------------------------------------


def _resource_value(value):
    value = getattr(value, "value", value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def record_slots(
    ring_dir: str | Path,
    workflow,
    gpus: int | None = None,
    gpus_per_execution: int = 1,
    gpu_profile: bool = False,
    cluster_slots: int | None = None,
) -> dict:
    """Write slots.json: the cores, jobs and GPU slots the running Snakemake gives
    (`gpu_profile`: the profile asks for GPUs on this machine, as profiles/gpu does), and
    on a cluster the executions its partition runs at once (`cluster_slots`)."""
    resources = getattr(workflow, "global_resources", {}) or {}
    info = {
        "cores": _resource_value(resources.get("_cores")),
        "jobs": _resource_value(resources.get("_nodes")),
        "gpus": gpus if gpus is not None else _resource_value(resources.get("gpu")),
        "gpus_per_execution": gpus_per_execution,
        "gpu_profile": gpu_profile,
        "cluster_slots": cluster_slots,
        "at": time.time(),
    }
    layout = RingLayout(Path(ring_dir))
    layout.root.mkdir(parents=True, exist_ok=True)
    atomic_write_json(layout.slots, info)
    return info


def slots_for(info: dict | None, threads: int) -> int:
    """Executions that run side by side: jobs, cores / threads per execution, GPU slots,
    and on a cluster what its partition holds at once (a profile's `jobs` can be far more)."""
    if not info:
        return 1
    slots = info.get("jobs") or sys.maxsize
    if info.get("cluster_slots"):
        slots = min(slots, info["cluster_slots"])
    cores = info.get("cores")
    if cores:
        slots = min(slots, max(1, cores // max(1, min(threads, cores))))
    if info.get("gpus"):
        slots = min(slots, max(1, info["gpus"] // max(1, info.get("gpus_per_execution") or 1)))
    return max(1, min(slots, 1_000_000))


# ---- what was measured -------------------------------------------------------------------


def _mode(weights_mode: str | None) -> str:
    if weights_mode in (statuses.TRAIN, statuses.FRESH):
        return TRAIN
    return REPLAY if weights_mode == statuses.REPLAY else NONE


def _duration(result: ExecutionResult) -> float:
    """The whole execution: weights lock, replay or registration and the program."""
    wall = float(result.wall_s or 0.0)
    started, ended = result.started_at, result.ended_at
    if isinstance(started, int | float) and isinstance(ended, int | float):
        return max(wall, float(ended) - float(started))
    return wall


def _ratio(numerator: float | None, denominator: float | None) -> float:
    if not numerator or not denominator:
        return 1.0
    return numerator / denominator


class Measurements:
    """Every finished execution's time, per node, kind (train, replay, none) and view."""

    def __init__(self, ring: Ring, layout: RingLayout):
        self.ring = ring
        self.runs: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
        # Scoring by one scorer call, and by several (a guard run's bootstrap, one call per
        # resample or one `--bootstrap B` call beside the score's own).
        self.scoring: dict[str, list[float]] = defaultdict(list)
        self.bootstrap_scoring: dict[str, list[float]] = defaultdict(list)
        self.review_command: list[float] = []
        self.count = 0
        slurm_runs: dict[str, float] = {}  # SLURM job id: the execution's own seconds
        for node, view, _variant, path in layout.results():
            folder = path.parent
            result = read_result(path)
            if result.status != statuses.OK:
                continue
            self.runs[node][_mode(result.weights_mode)][view].append(_duration(result))
            self.count += 1
            if result.slurm_job_id:
                slurm_runs[result.slurm_job_id] = _duration(result)
            score = folder / "score.json"
            if score.exists():
                scored = read_json(score)
                seconds = scored.get("scoring_s")
                if isinstance(seconds, int | float):
                    several = (scored.get("scorer_calls") or 1) > 1
                    (self.bootstrap_scoring if several else self.scoring)[view].append(seconds)
        for path in layout.reviews():
            for check in read_json(path).get("checks", []):
                if check.get("check") == "review_command" and "wall_s" in check:
                    self.review_command.append(float(check["wall_s"]))
        self.bytes = {name: view.size_bytes for name, view in ring.views.items()}
        self.train_replay_ratio = self._train_replay_ratio()
        # Under SLURM: what each execution costs as a job beyond its own run.
        self.job_overhead_s = (
            job_overhead_s(query_job_times(sorted(slurm_runs)), slurm_runs) if slurm_runs else None
        )

    def _train_replay_ratio(self) -> float | None:
        """The ring's measured training/replay ratio, over nodes that did both."""
        trained, replayed = [], []
        for kinds in self.runs.values():
            if kinds.get(TRAIN) and kinds.get(REPLAY):
                trained.append(fmean(s for runs in kinds[TRAIN].values() for s in runs))
                replayed.append(fmean(s for runs in kinds[REPLAY].values() for s in runs))
        if not trained or not sum(replayed):
            return None
        return sum(trained) / sum(replayed)

    def _scaled(self, per_view: dict, view: str) -> float | None:
        """Runs on other views, scaled to `view` by the size of the inputs."""
        values = [
            fmean(runs) * _ratio(self.bytes.get(view), self.bytes.get(other))
            for other, runs in per_view.items()
            if runs
        ]
        return fmean(values) if values else None

    def program(self, node: str, view: str, mode: str) -> Price:
        own = self.runs.get(node, {})
        if own.get(mode, {}).get(view):
            return Price(fmean(own[mode][view]), MEASURED, "own runs on the view")
        scaled = self._scaled(own.get(mode, {}), view)
        if scaled is not None:
            return Price(scaled, ASSUMED, "own runs on other views, scaled by input size")
        ratio = self.train_replay_ratio
        ratio_how = (
            "the ring's training/replay ratio"
            if ratio
            else (f"an assumed training/replay ratio of {ASSUMED_TRAIN_REPLAY_RATIO:g}")
        )
        ratio = ratio or ASSUMED_TRAIN_REPLAY_RATIO
        if mode == TRAIN and (replay := self._scaled(own.get(REPLAY, {}), view)) is not None:
            return Price(replay * ratio, ASSUMED, f"own replays x {ratio_how}")
        if mode == REPLAY and (train := self._scaled(own.get(TRAIN, {}), view)) is not None:
            if self.train_replay_ratio is None:  # nothing says how much less a replay costs
                return Price(train, ASSUMED, "own trainings (a replay costs at most that)")
            return Price(train / ratio, ASSUMED, f"own trainings / {ratio_how}")
        others = [
            s
            for n, kinds in self.runs.items()
            if n != node
            for s in [self._scaled(kinds.get(mode, {}), view)]
            if s is not None
        ]
        if others:
            return Price(statistics.median(others), ASSUMED, "median of other nodes' runs")
        anything = [
            s
            for kinds in self.runs.values()
            for per_view in kinds.values()
            for s in [self._scaled(per_view, view)]
            if s is not None
        ]
        if anything:
            return Price(max(anything), ASSUMED, "slowest measured run of any kind")
        return Price(FALLBACK_EXECUTION_S, ASSUMED, "fallback: nothing measured")

    def scoring_price(self, view: str, calls: int = 1) -> Price:
        """A run's scoring on `view` by `calls` scorer calls (more than one: a guard run's
        bootstrap, priced from measured bootstraps, else from one call's price)."""
        if calls > 1:
            if self.bootstrap_scoring.get(view):
                return Price(fmean(self.bootstrap_scoring[view]), MEASURED,
                             "measured bootstrap scoring on the view")  # fmt: skip
            every = [s for runs in self.bootstrap_scoring.values() for s in runs]
            if every:
                return Price(fmean(every), ASSUMED, "measured bootstrap scoring on other views")
            one = self.scoring_price(view)
            return Price(one.seconds * calls, ASSUMED,
                         f"{one.how} x {calls} scorer calls (the guard's bootstrap)")  # fmt: skip
        if self.scoring.get(view):
            return Price(fmean(self.scoring[view]), MEASURED, "measured scoring on the view")
        every = [s for runs in self.scoring.values() for s in runs]
        if every:
            return Price(fmean(every), ASSUMED, "measured scoring on other views")
        return Price(FALLBACK_SCORING_S, ASSUMED, "fallback: no scoring measured")

    def review_command_price(self) -> Price:
        if self.review_command:
            return Price(fmean(self.review_command), MEASURED, "measured review commands")
        configured = self.ring.config.reserve.review_command_min
        return Price(configured * 60.0, ASSUMED, "reserve.review_command_min")


# ---- what is left, as it will run --------------------------------------------------------


class Planner:
    """The executions final selection still has, batched as the workflow schedules them."""

    def __init__(self, ring: Ring, layout: RingLayout, measured: Measurements | None = None):
        self.ring, self.layout = ring, layout
        self.index = read_json(layout.nodes_index)
        self.measured = measured or Measurements(ring, layout)
        self.slots_info = read_json(layout.slots) if layout.slots.exists() else None
        self.views = ring.search_views
        self.guard_views = ring.guard_views or self.views
        self.base = usable_baseline(self.index)
        # The side finalists are guarded against: the chain's incumbent, or the baseline.
        self.against = reference(ring, self.index)["node"]
        self._nodes: dict[str, Node] = {}

    # -- single executions --

    def node(self, node: str) -> Node:
        if node not in self._nodes:
            self._nodes[node] = read_node(self.layout.node_json(node))
        return self._nodes[node]

    def trains(self, node: str) -> bool:
        return bool(self.node(node).solution["per_view_paths"])

    def pending(self, node: str, view: str, variant: str) -> bool:
        if self.layout.score(node, view, variant).exists():
            return False
        # A comparable imported promotion score stands in for the run (docs/operations.md#chains).
        return variant not in ("s1", "s2") or not imported_score(
            self.layout, node, view, variant, self.ring.search_hash
        )

    def mode(self, node: str, view: str, variant: str) -> str:
        """Whether the execution will train, replay, or run without weights."""
        spec = self.node(node).spec(view, variant)
        if spec is None:  # a view the node has no plan for yet (a guard view): trains once
            if not self.trains(node):
                return NONE
            first_guard = f"g{self.ring.guard_seeds[0]}" if self.ring.guard_seeds else None
            return REPLAY if variant.startswith("g") and variant != first_guard else TRAIN
        if spec["weights"] == "none":
            return NONE
        if spec["weights"] == "fresh":
            return TRAIN
        owner = self.index["keys"].get(spec["key"])
        if owner is None or owner["in_store"]:
            return REPLAY
        if owner["trainer"] == [node, view, variant]:
            return TRAIN
        trainer = self.layout.result(*owner["trainer"])
        if trainer.exists() and read_result(trainer).status != statuses.OK:
            return TRAIN  # the key stays unregistered: each replayer trains it itself
        return REPLAY

    def job(self, node: str, view: str, variant: str, cold_start: bool = False) -> Job:
        mode = self.mode(node, view, variant)
        price = self.measured.program(node, view, mode)
        if cold_start and mode == TRAIN:
            price = Price(
                price.seconds * reserve.COLD_START_FACTOR,
                ASSUMED,
                f"{price.how}, x {reserve.COLD_START_FACTOR:g} cold start",
            )
        if (overhead := self.measured.job_overhead_s) is not None:
            price = Price(price.seconds + overhead, price.basis,
                          f"{price.how}, + {overhead:.1f} s per SLURM job (measured)")  # fmt: skip
        scoring = self.measured.scoring_price(view, self.scorer_calls(view, variant))
        return Job(job_name(node, view, variant), price, scoring)

    def scorer_calls(self, view: str, variant: str) -> int:
        """How many times scoring an execution runs the scorer: once, and for a guard run
        or the final view's a bootstrap (scoring.py) where the scorer draws the rows."""
        bootstrapped = is_guard_variant(variant) or (
            view == self.ring.final_view and variant == "s0"
        )
        if not bootstrapped or scorer_mode(self.ring.task) != "resample":
            return 1
        return 1 + len(bootstrap_calls(self.ring.task, self.ring.config.guard.bootstrap))

    def batch(self, stage: str, runs, label: str, after: Price | None = None) -> Batch:
        runs = [r for r in runs if self.pending(*r[:3])]
        views = {r[1] for r in runs} or set(self.views)
        slots = min(
            slots_for(self.slots_info, view_limits(self.ring, view)["threads"]) for view in views
        )
        jobs = tuple(self.job(*r) for r in runs)
        return Batch(stage, jobs, slots=slots, after=after, label=label)

    # -- who runs --

    def by_seed0(self) -> list[str]:
        """Candidates by seed-0 mean (promotion's own ordering), unscored ones last."""
        held = self.against if self.against != self.base else None
        candidates = [n for n in candidate_ids(self.index) if n != held]
        means = {n: node_mean(self.ring, self.layout, n, "s0")["mean"] for n in candidates}
        scored = [{"node": n, "score": means[n]} for n in candidates if means[n] is not None]
        ranked = sorted(scored, key=rank_key(self.ring.task.direction))
        return [row["node"] for row in ranked] + [n for n in candidates if means[n] is None]

    def promoted(self) -> list[str]:
        if self.layout.promotion.exists():
            return read_json(self.layout.promotion)["promoted"]
        return self.by_seed0()[: self.ring.config.promote_top_k]

    def finalists(self, k: int) -> list[str]:
        if self.layout.ranking.exists():
            return read_json(self.layout.ranking)["finalists"][:k]
        return self.promoted()[:k]

    def guard_on(self) -> bool:
        return bool(self.ring.config.guard.enabled)

    def guard_started(self) -> bool:
        for node in (self.against, *candidate_ids(self.index)):
            for view in self.guard_views if node else ():
                for seed in self.ring.guard_seeds:
                    if self.layout.result(node, view, f"g{seed}").exists():
                        return True
        return False

    # -- the batches --

    def batches(self, finalists: list[str]) -> list[Batch]:
        first = self.views[0]
        out = []
        if not self.layout.search.exists():
            runs = [(n, v, "s0") for n in finalists for v in self.views]
            out.append(self.batch("search", runs, "seed-0 checks of the finalists"))
        if not self.layout.ranking.exists():
            runs = [(n, v, s) for n in self.promoted() for v in self.views for s in ("s1", "s2")]
            out.append(self.batch("promotion", runs, "promotion seeds 1 and 2"))
        if self.layout.decision.exists():
            return [b for b in out if b.jobs or b.after]
        chosen = finalists[:1]  # no guard: the top finalist is chosen, unreviewed
        if self.guard_on() and self.base is None:
            chosen = []  # final selection is refused: no candidate runs
        elif self.guard_on():
            chosen = self._review_and_guard(finalists, first, out)
        final_view = self.ring.final_view
        # The winner is not known yet: the slowest cold start among who may still win.
        colds = [(n, final_view, "s0", True) for n in chosen if self.pending(n, final_view, "s0")]
        final = [max(colds, key=lambda r: self.job(*r).program.seconds)] if colds else []
        final += [(side, final_view, "s0") for side in dict.fromkeys((self.base, self.against))
                  if side]  # fmt: skip
        out.append(self.batch("final", final, "final-view runs of the chosen side and baseline"))
        return [b for b in out if b.jobs or b.after]

    def _review_and_guard(self, finalists: list[str], first: str, out: list) -> list[str]:
        """Review then guard each finalist in rank order, worst case (none passes early);
        returns who may still be chosen for the final-view run."""
        eligible, baseline_guard = [], True
        for rank, node in enumerate(finalists, start=1):
            verdict_path = self.layout.verdict(rank)
            if verdict_path.exists():
                verdict = read_json(verdict_path)
                if verdict.get("replace"):
                    return [node]
                if ends_selection(verdict):
                    return []
                continue
            review_path = self.layout.review(node)
            if review_path.exists():
                if not read_json(review_path)["passed"]:
                    continue
            else:
                # The view-blind screen's runs, and the further runs it asked for once known.
                variants = ["s0", "blind-s0", "blind2-s0", *screened_variants(self.layout, node)]
                after = self.measured.review_command_price() if self.ring.config.review else None
                runs = [(node, first, v) for v in variants]
                out.append(self.batch("review", runs, f"review of {node}", after=after))
            runs = [(node, v, f"g{s}") for v in self.guard_views for s in self.ring.guard_seeds]
            if baseline_guard:
                runs += [
                    (self.against, v, f"g{s}")
                    for v in self.guard_views
                    for s in self.ring.guard_seeds
                ]
                baseline_guard = False
            out.append(self.batch("guard", runs, f"guard of {node} and the baseline"))
            eligible.append(node)
        return eligible


def job_name(node: str, view: str, variant: str) -> str:
    """An execution's name in the reserve's batches and snapshot."""
    return f"{node} {view}/{variant}"


def screened_variants(layout: RingLayout, node: str) -> list[str]:
    from .final import review_variants

    path = layout.screen(node)
    return review_variants(read_json(path)) if path.exists() else []


# ---- the estimate ------------------------------------------------------------------------


def _terms_for(planner: Planner, finalists: list[str]) -> list[reserve.Term]:
    return reserve.estimate(planner.batches(finalists))


def plan_final_k(ring: Ring, layout: RingLayout, planner: Planner, ordered: list[str]) -> dict:
    """How many finalists the ring tries: final_top_k, or fewer when the capped reserve
    cannot cover them; settled (final_k.json) before the first guard run, never after."""
    configured = ring.config.final_top_k
    if layout.final_k.exists():
        return {**read_json(layout.final_k), "settled": True}
    plan = {"k": configured, "configured": configured, "settled": False}
    if not planner.guard_on() or planner.base is None:
        return {**plan, "reason": "no guard: final_top_k as configured"}
    if planner.guard_started():
        return {**plan, "reason": "a guard run has started: k is never lowered after it"}
    timeline = ring.config.timeline
    cap_min = (ring.stop_at - ring.start) / 60 / 2
    k, table = reserve.fit_final_k(
        lambda k: reserve.total_seconds(_terms_for(planner, ordered[:k])),
        configured,
        timeline.reserve_pad_min,
        cap_min,
    )
    why = (
        "the capped reserve covers final_top_k"
        if k == configured
        else f"the reserve, capped at {cap_min:g} min, covers {k} of {configured} finalists"
    )
    return {**plan, "k": k, "cap_min": cap_min, "table": table, "reason": why}


def estimate_ring(ring_dir: str | Path) -> dict:
    """The estimate as it stands: terms, stage shares, total, the k it prices, the slots."""
    layout = RingLayout(Path(ring_dir))
    ring = load_ring(layout.root)
    planner = Planner(ring, layout)
    ordered = (
        read_json(layout.ranking)["finalists"] if layout.ranking.exists() else planner.promoted()
    )
    k_plan = plan_final_k(ring, layout, planner, ordered)
    batches = planner.batches(
        planner.finalists(k_plan["k"]) if layout.ranking.exists() else ordered[: k_plan["k"]]
    )
    terms = reserve.estimate(batches)
    return {
        "terms": [t.to_dict() for t in terms],
        "batches": [reserve.batch_record(batch) for batch in batches],
        "stages": reserve.stage_seconds(terms),
        "estimate_s": reserve.total_seconds(terms),
        "measured_executions": planner.measured.count,
        "final_top_k": k_plan,
        "slots": planner.slots_info,
    }


def settle_final_k(ring_dir: str | Path, ordered: list[str]) -> int:
    """Fix the number of finalists once, before any guard run: `ordered` is the ranking.

    Written to final_k.json (selection reads it through ring.clock.final_top_k); a
    lowered k is recorded in the ledger and the events with α' = α / k.
    """
    layout = RingLayout(Path(ring_dir))
    ring = load_ring(layout.root)
    if layout.final_k.exists():
        return int(read_json(layout.final_k)["k"])
    planner = Planner(ring, layout)
    plan = plan_final_k(ring, layout, planner, ordered)
    alpha = ring.config.guard.alpha
    record = {
        "k": plan["k"],
        "configured": plan["configured"],
        "alpha": alpha,
        "alpha_prime": alpha / plan["k"],
        "reason": plan["reason"],
        "cap_min": plan.get("cap_min"),
        "table": plan.get("table", []),
        "finalists": ordered[: plan["k"]],
        "at": time.time(),
    }
    atomic_write_json(layout.final_k, record)
    if record["k"] < record["configured"]:
        Ledger(layout.ledger).append(
            "final_top_k_lowered",
            k=record["k"],
            configured=record["configured"],
            alpha_prime=record["alpha_prime"],
        )
        emit_event(
            layout.root,
            "final_top_k_lowered",
            k=record["k"],
            configured=record["configured"],
            alpha_prime=record["alpha_prime"],
            reason=record["reason"],
        )
    return record["k"]


# ---- how good the estimate was -----------------------------------------------------------


def _union_seconds(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, -math.inf
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def stage_timing(ring: Ring, layout: RingLayout) -> dict:
    """Per stage of final selection: the share reserved when the search ended, what its
    prices came to for the executions that ran (`priced_ran_s`: the reserve holds the
    worst case, this tells how well it priced the work that was done), and the wall time
    its executions (and review commands) actually took. An execution that ran
    as a SLURM job counts from the job's submission to its end (sacct), as the reserve
    prices it: the job's start and the Snakemake starts inside it are the stage's time."""
    intervals: dict[str, list[tuple[float, float]]] = defaultdict(list)
    in_jobs: dict[str, tuple[str, tuple[float, float]]] = {}
    ran: dict[str, set[str]] = defaultdict(set)
    for node, view, variant, path in layout.results():
        folder = path.parent
        stage = stage_of(ring, view, variant)
        result = read_result(path)
        started = result.started_at
        if stage not in FINAL_STAGES or not isinstance(started, int | float):
            continue
        ran[stage].add(job_name(node, view, variant))
        end = result.ended_at or started
        score = folder / "score.json"
        if score.exists():
            end += read_json(score).get("scoring_s") or 0.0
        if result.slurm_job_id:
            in_jobs[result.slurm_job_id] = (stage, (started, end))
        else:
            intervals[stage].append((started, end))
    times = query_job_times(sorted(in_jobs)) if in_jobs else {}
    for job, (stage, (started, end)) in in_jobs.items():
        t = times.get(job)
        if t is not None and t.submitted is not None and t.ended is not None:
            started, end = min(started, t.submitted), max(end, t.ended)
        intervals[stage].append((started, end))
    for path in layout.reviews():
        for check in read_json(path).get("checks", []):
            if check.get("check") == "review_command" and "ended_at" in check:
                intervals["review"].append((check["ended_at"] - check["wall_s"], check["ended_at"]))
    previous = read_json(layout.final_timing) if layout.final_timing.exists() else {}
    reserved = previous.get("reserved")
    before_start = previous.get("before_start", {})
    started = read_json(layout.search).get("ended_at") if layout.search.exists() else None
    decided = read_json(layout.decision).get("decided_at") if layout.decision.exists() else None
    ends = [stop for spans in intervals.values() for _, stop in spans]
    ended = decided or (max(ends) if ends else None)
    # Rings whose snapshot predates the per-job prices have no priced_ran_s.
    priced_batches = (reserved or {}).get("batches")
    every_ran = set().union(*ran.values())
    priced = (
        None if priced_batches is None
        else reserve.priced_for_what_ran(priced_batches, every_ran)
    )  # fmt: skip
    planned = {name for batch in priced_batches or () for name in batch["jobs"]}
    stages = []
    for stage in FINAL_STAGES:
        spans = intervals.get(stage, [])
        stages.append(
            {
                "stage": stage,
                "reserved_s": None if reserved is None else reserved["stages"].get(stage),
                "reserved_at_start_s": before_start.get(stage),
                "priced_ran_s": None if priced is None else priced[stage],
                "actual_s": _union_seconds(spans),
                "executions": len(spans),
                "unpriced_executions": (None if priced is None else len(ran[stage] - planned)),
            }
        )
    return {
        "reserved": reserved,
        "before_start": before_start,
        "stages": stages,
        "final_selection": {
            "started_at": started,
            "ended_at": ended,
            "actual_s": None if started is None or ended is None else max(0.0, ended - started),
            "reserved_s": None if reserved is None else reserved["estimate_s"],
            "pad_min": ring.config.timeline.reserve_pad_min,
            "complete": decided is not None,
        },
    }


def record_timing(
    ring: Ring, layout: RingLayout, snapshot: dict | None, shares: dict[str, float] | None
) -> dict:
    """Rewrite final_timing.json. The first call after the search ended keeps `snapshot`
    (the plan of that moment) as what was reserved; until a stage's first execution
    starts, its latest share is kept as what was reserved when it started."""
    with FileLock(str(layout.final_timing) + ".lock", timeout=reserve.LOCK_TIMEOUT_S):
        if layout.stop_manifest.exists():
            return read_json(layout.final_timing) if layout.final_timing.exists() else {}
        return _record_timing(ring, layout, snapshot, shares)


def _record_timing(ring, layout, snapshot, shares) -> dict:
    record = stage_timing(ring, layout)
    if record["reserved"] is None and snapshot is not None:
        record["reserved"] = snapshot
    if shares is not None:
        started = {row["stage"] for row in record["stages"] if row["executions"]}
        record["before_start"] = {
            **record["before_start"],
            **{s: shares[s] for s in FINAL_STAGES if s not in started},
        }
    atomic_write_json(layout.final_timing, record)
    return stage_timing(ring, layout)


# ---- one tick ----------------------------------------------------------------------------


def stage_pad_s(ring: Ring, cutoff: float, estimates: dict[str, float]) -> float:
    """The pad spread over the stages' shares: `reserve_pad_min`, but no more than the
    time between the cutoff and stop_at - stop_margin_s leaves beyond the estimates. A full
    pad in a short ring (the reserve is capped at half the wall clock) would plan the first
    stages' deadlines before the cutoff and cut their executions before they start."""
    timeline = ring.config.timeline
    window = ring.stop_at - timeline.stop_margin_s - cutoff
    slack = window - sum(estimates.get(stage, 0.0) for stage in FINAL_STAGES)
    return min(timeline.reserve_pad_min * 60, max(0.0, slack))


def tick(ring_dir: str | Path, now: float | None = None) -> dict:
    """Re-estimate once: move the cutoff earlier if the reserve grew, re-plan the stage
    deadlines, record the estimate and the stage timing."""
    layout = RingLayout(Path(ring_dir))
    if layout.stop_manifest.exists():
        # A finished ring is immutable: nothing is left to estimate or move.
        return {"moved": False, "reason": "the ring has ended"}
    ring = load_ring(layout.root)
    if not layout.nodes_index.exists():
        return {"moved": False, "reason": "no nodes yet"}
    now = time.time() if now is None else now
    timeline = ring.config.timeline
    plan = estimate_ring(ring_dir)
    estimate_s = plan["estimate_s"]
    wall_min = (ring.stop_at - ring.start) / 60
    reserve_min = reserve.reserve_minutes(
        timeline.final_reserve_min, estimate_s, timeline.reserve_pad_min, wall_min
    )
    cutoffs = reserve.CutoffFile(layout.cutoff)
    current = cutoffs.cutoff()
    measured = plan["measured_executions"] > 0
    proposed = reserve.next_cutoff(current, ring.stop_at, ring.start, reserve_min)
    # Nothing measured yet: every price is a fallback, too rough to move the cutoff on.
    moved = (
        measured
        and proposed < current
        and cutoffs.move_earlier(proposed, reserve_min=reserve_min, estimate_s=estimate_s, at=now)
    )
    stages = None
    if measured:
        stop_margin_s = timeline.stop_margin_s
        cutoff = min(current, proposed) if moved else current
        pad_s = stage_pad_s(ring, cutoff, plan["stages"])
        stages = reserve.stage_deadlines(ring.stop_at, stop_margin_s, plan["stages"], pad_s)
    cutoffs.note_estimate(
        reserve_min=reserve_min,
        estimate_s=estimate_s,
        stages=stages,
        breakdown=plan["terms"],
        planned_final_top_k=plan["final_top_k"]["k"],
        slots=plan["slots"],
    )
    if moved:
        emit_event(
            layout.root,
            "cutoff_moved",
            cutoff=proposed,
            previous=current,
            reserve_min=reserve_min,
            estimate_s=estimate_s,
        )
    snapshot = {
        "at": now,
        "cutoff": min(current, proposed) if moved else current,
        "reserve_min": reserve_min,
        "estimate_s": estimate_s,
        "stages": {s: plan["stages"][s] for s in FINAL_STAGES},
        # Each job's price: what the work that ran was priced at (stage_timing).
        "batches": plan["batches"],
    }
    if layout.search.exists() and measured:
        record_timing(ring, layout, snapshot, plan["stages"])
    return {
        "moved": bool(moved),
        "cutoff": min(current, proposed) if moved else current,
        "reserve_min": reserve_min,
        "estimate_s": estimate_s,
        "stages": stages,
        "final_top_k": plan["final_top_k"],
        "terms": plan["terms"],
        "slots": plan["slots"],
    }


def render_breakdown(result: dict) -> str:
    """The estimate as a table: every term, measured or assumed, and how it was priced."""
    lines = [f"{'stage':<10} {'term':<15} {'seconds':>9}  {'basis':<8} {'items':>9}  how"]
    for term in result["terms"]:
        items = f"{term['measured']}m/{term['assumed']}a"
        lines.append(
            f"{term['stage']:<10} {term['term']:<15} {term['seconds']:>9.1f}  "
            f"{term['basis']:<8} {items:>9}  {'; '.join(term['how'])}"
        )
    lines.append(f"{'total':<26} {result['estimate_s']:>9.1f}")
    k = result["final_top_k"]
    slots = result["slots"]
    lines += [
        f"reserve {result['reserve_min']:.2f} min; cutoff {time.ctime(result['cutoff'])}"
        f"{' (moved earlier)' if result['moved'] else ''}",
        f"finalists priced: {k['k']} of final_top_k {k['configured']}"
        f"{' (settled)' if k.get('settled') else ''}: {k.get('reason', '')}",
        "slots: "
        + (
            f"cores {slots.get('cores')}, jobs {slots.get('jobs')}, gpus {slots.get('gpus')}"
            if slots
            else "1 (no scheduler recorded)"
        ),
    ]
    for stage, plan in (result["stages"] or {}).items():
        lines.append(
            f"deadline {stage:<10} {time.ctime(plan['deadline'])} (share {plan['share_s']:.1f} s)"
        )
    return "\n".join(lines)


# ---- the background thread ---------------------------------------------------------------


def _selection_signature(layout: RingLayout) -> tuple:
    try:
        return tuple(sorted(os.listdir(layout.selection)))
    except FileNotFoundError:
        return ()


def tick_safely(ring_dir: str | Path) -> None:
    """One tick that never raises (the estimator must never bring the ring down)."""
    try:
        if RingLayout(Path(ring_dir)).ring_json.exists():
            tick(ring_dir)
    except Exception as exc:
        if Path(ring_dir).is_dir():  # never a folder of its own for the event
            emit_event(Path(ring_dir), "reserve_estimate_failed", error=str(exc))


def start_in_background(
    ring_dir: str | Path, every_s: float = TICK_S, watch_s: float = WATCH_S
) -> threading.Thread:
    """Tick every `every_s`, and at once whenever a step of final selection is recorded
    (a file appears in selection/), so each stage starts with a fresh plan. The ring's
    folder is taken absolute now: Snakemake returns to the folder it was started from as
    the workflow ends, while this thread may still tick."""
    ring_dir = Path(ring_dir).resolve()
    layout = RingLayout(ring_dir)

    def loop() -> None:
        last_tick, seen = 0.0, None
        while True:
            time.sleep(watch_s)
            signature = _selection_signature(layout)
            if signature == seen and time.monotonic() - last_tick < every_s:
                continue
            if layout.ring_json.exists():
                tick_safely(ring_dir)
                seen, last_tick = signature, time.monotonic()

    thread = threading.Thread(target=loop, name="ringflow-timekeeper", daemon=True)
    thread.start()
    return thread
