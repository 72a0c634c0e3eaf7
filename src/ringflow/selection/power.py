"""Power before the ring (docs/guard.md#power): the smallest advantage the guard could
detect, estimated from the baseline's own runs on the guard view before any ring spends
its guard seeds.

The estimate takes a candidate as noisy as the baseline and independent of it row by row
(a conservative reading: a candidate that errs on the same rows is easier to tell apart),
so the paired difference's variance is twice the baseline's row-resampling variance plus
twice its seed-to-seed variance over the guard seeds, averaged over the guard views.
"""

from __future__ import annotations

import math
from pathlib import Path
from statistics import NormalDist, fmean, pvariance

# Probe seeds: far above any guard seed a ring is given (the smallest integers >= 3 that
# no ring of the store exposed), so the probe exposes none of them.
PROBE_SEEDS = (900_001, 900_002)


def detectable_advantage(
    runs: dict[str, list[list[float]]], *, guard_seeds: int, alpha_prime: float
) -> dict:
    """`runs[view]` holds, per probe run, its bootstrap scores over the guard rows."""
    if not runs or any(len(r) < 2 for r in runs.values()):
        raise ValueError("the power estimate needs at least two probe runs per guard view")
    views = len(runs)
    row_var = fmean(fmean(pvariance(r) for r in by_run) for by_run in runs.values())
    seed_var = fmean(pvariance([fmean(r) for r in by_run]) for by_run in runs.values())
    sd = math.sqrt((2 * row_var + 2 * seed_var / guard_seeds) / views)
    z = NormalDist().inv_cdf(1 - alpha_prime)
    return {
        "detectable": z * sd,
        "row_sd": math.sqrt(row_var),
        "seed_sd": math.sqrt(seed_var),
        "guard_seeds": guard_seeds,
        "alpha_prime": alpha_prime,
        "views": sorted(runs),
        "probe_seeds": list(PROBE_SEEDS),
    }


def probe_baseline(ring: dict, node: str) -> dict:
    """Run the baseline on every guard view under the probe seeds, score each run on the
    guard's bootstrap resamples, and estimate the guard's power (a throwaway ring)."""
    from ..core.clock import final_top_k
    from ..core.jsonio import atomic_write_json, read_json
    from ..core.layout import RingLayout
    from ..execute import run_execution
    from ..guardstats import alpha_prime
    from ..scoring import score_execution
    from .final import guard_views

    layout = RingLayout(Path(ring["ring_dir"]))
    record = read_json(layout.node_json(node))
    views = guard_views(ring)
    for view in views:
        plan = record["executions"][view]
        template = plan[f"g{ring['guard_seeds'][0]}"]
        for seed in PROBE_SEEDS:
            spec = {**template, "seed": seed}
            if record["solution"].get("seed_affects_training"):
                spec.update(weights="fresh", key=None)
            plan[f"g{seed}"] = spec
    atomic_write_json(layout.node_json(node), record)
    runs: dict[str, list[list[float]]] = {}
    for view in views:
        for seed in PROBE_SEEDS:
            result = run_execution(ring["ring_dir"], node, view, f"g{seed}")
            if result["status"] != "ok":
                raise ValueError(f"the baseline's probe run on {view} {result['status']}: "
                                 f"{result.get('reason', '')}")  # fmt: skip
            score = score_execution(ring["ring_dir"], node, view, f"g{seed}")
            if not score.get("bootstrap"):
                raise ValueError(f"the baseline's probe run on {view} has no bootstrap scores: "
                                 f"{score.get('reason', '')}")  # fmt: skip
            runs.setdefault(view, []).append(score["bootstrap"])
    k = final_top_k(ring)
    a_prime = alpha_prime(ring["config"]["guard"]["alpha"], k)
    return detectable_advantage(runs, guard_seeds=len(ring["guard_seeds"]), alpha_prime=a_prime)
