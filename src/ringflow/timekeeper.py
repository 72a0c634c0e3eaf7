"""The measured final reserve, kept up to date while a ring runs (SPEC 9).

Every minute the ring prices what final selection still needs with the execution and
scoring times measured so far and moves the persisted cutoff earlier if the reserve grew.
It runs as a daemon thread of the Snakemake process that drives the ring; `ringflow
reserve RING_DIR` runs one tick by hand.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from statistics import fmean

from . import reserve
from .jsonio import read_json
from .ring.layout import RingLayout
from .ring.ledger import emit_event
from .selection.promote import candidate_ids, node_mean, rank_key

TICK_S = 60.0
FALLBACK_SEED_S = 60.0


def _exec_seconds(layout: RingLayout, node: str, views: list[str], variant: str) -> list[float]:
    seconds = []
    for view in views:
        result, score = layout.result(node, view, variant), layout.score(node, view, variant)
        if result.exists():
            spent = read_json(result).get("wall_s", 0.0)
            if score.exists():
                spent += read_json(score).get("scoring_s", 0.0)
            seconds.append(spent)
    return seconds


def _seed_seconds(layout, node, views) -> float | None:
    """One seed of a node: execution plus scoring time summed over the search views."""
    measured = _exec_seconds(layout, node, views, "s0")
    return fmean(measured) * len(views) if measured else None


def _missing(layout, node, views, variant) -> bool:
    return any(not layout.score(node, view, variant).exists() for view in views)


def workload(ring: dict, layout: RingLayout) -> tuple[reserve.FinalWorkload, dict]:
    index = read_json(layout.nodes_index)
    views = ring["search_views"]
    candidates = candidate_ids(index)
    direction = ring["task"]["direction"]
    means = {n: node_mean(ring, layout, n, "s0")["mean"] for n in candidates}
    scored = [{"node": n, "score": means[n]} for n in candidates if means[n] is not None]
    unscored = [n for n in candidates if means[n] is None]
    ranked = [row["node"] for row in sorted(scored, key=rank_key(direction))] + unscored
    top = ranked[: ring["config"]["final_top_k"]]
    guard_seeds = ring["guard_seeds"] if ring["config"]["guard"]["enabled"] else []
    finalists = []
    for node in top:
        record = read_json(layout.node_json(node))
        reviews = 2 if record["solution"]["per_view_paths"] else 1
        finalists.append(
            reserve.FinalistWork(
                node=node,
                view_checks_pending=sum(not layout.score(node, v, "s0").exists() for v in views),
                reviews_pending=0 if layout.review(node).exists() else reviews,
                promotion_seeds_missing=sum(_missing(layout, node, views, s) for s in ("s1", "s2")),
                guard_seeds_pending=sum(
                    _missing(layout, node, views, f"g{s}") for s in guard_seeds
                ),
            )
        )
    base = index["baseline"]
    work = reserve.FinalWorkload(
        finalists=tuple(finalists),
        search_views=len(views),
        guard_seeds=len(guard_seeds),
        has_baseline=base is not None,
        baseline_guard_seeds_pending=None
        if base is None
        else sum(_missing(layout, base, views, f"g{s}") for s in guard_seeds),
        baseline_final_pending=base is not None
        and not layout.score(base, ring["final_view"], "s0").exists(),
    )
    measured = {
        "nodes": {n: _seed_seconds(layout, n, views) for n in candidates},
        "baseline": None if base is None else _seed_seconds(layout, base, views),
        "fallback_s": FALLBACK_SEED_S,
    }
    return work, measured


def tick(ring_dir: str | Path, now: float | None = None) -> dict:
    """Re-estimate the reserve once; move the cutoff earlier if it grew."""
    layout = RingLayout(Path(ring_dir))
    ring = read_json(layout.ring_json)
    if not layout.nodes_index.exists():
        return {"moved": False, "reason": "no nodes yet"}
    timeline = ring["config"]["timeline"]
    work, measured = workload(ring, layout)
    estimate_s = reserve.estimate_final_seconds(work, measured)
    wall_min = (ring["stop_at"] - ring["start"]) / 60
    reserve_min = reserve.reserve_minutes(
        timeline["final_reserve_min"], estimate_s, timeline["reserve_pad_min"], wall_min
    )
    cutoffs = reserve.CutoffFile(layout.cutoff)
    current = cutoffs.cutoff()
    proposed = reserve.next_cutoff(current, ring["stop_at"], ring["start"], reserve_min)
    moved = proposed < current and cutoffs.move_earlier(
        proposed,
        reserve_min=reserve_min,
        estimate_s=estimate_s,
        at=time.time() if now is None else now,
    )
    if not moved:
        cutoffs.note_estimate(reserve_min=reserve_min, estimate_s=estimate_s)
    else:
        emit_event(
            layout.root,
            "cutoff_moved",
            cutoff=proposed,
            previous=current,
            reserve_min=reserve_min,
            estimate_s=estimate_s,
        )
    return {
        "moved": moved,
        "cutoff": min(current, proposed),
        "reserve_min": reserve_min,
        "estimate_s": estimate_s,
    }


def start_in_background(ring_dir: str | Path, every_s: float = TICK_S) -> threading.Thread:
    def loop() -> None:
        while True:
            time.sleep(every_s)
            try:
                if (Path(ring_dir) / "RING.json").exists():
                    tick(ring_dir)
            except Exception as exc:  # the estimator must never bring the ring down
                emit_event(Path(ring_dir), "reserve_estimate_failed", error=str(exc))

    thread = threading.Thread(target=loop, name="ringflow-timekeeper", daemon=True)
    thread.start()
    return thread
