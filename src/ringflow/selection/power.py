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

from ..core.seeds import PROBE_SEEDS
from ..core.state import Ring


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


def probe_variants() -> list[str]:
    return [f"g{seed}" for seed in PROBE_SEEDS]


def _estimate(ring: Ring, runs: dict[str, list[list[float]]]) -> dict:
    from ..core.clock import final_top_k
    from ..guardstats import alpha_prime

    a_prime = alpha_prime(ring.config.guard.alpha, final_top_k(ring))
    return detectable_advantage(runs, guard_seeds=len(ring.guard_seeds), alpha_prime=a_prime)


def _probe_scores(ring: Ring, node: str, view: str, variant: str) -> list[float]:
    """One probe run's bootstrap scores; ValueError naming what went wrong."""
    from ..core.jsonio import read_json
    from ..core.layout import RingLayout
    from ..core.node_state import read_result

    layout = RingLayout(Path(ring.ring_dir))
    result_path, score_path = layout.result(node, view, variant), layout.score(node, view, variant)
    if not result_path.exists():
        raise ValueError(f"the baseline's probe run on {view} did not run")
    result = read_result(result_path)
    if result.status != "ok":
        raise ValueError(f"the baseline's probe run on {view} {result.status}: "
                         f"{result.reason or ''}")  # fmt: skip
    score = read_json(score_path) if score_path.exists() else {}
    if not score.get("bootstrap"):
        raise ValueError(f"the baseline's probe run on {view} has no bootstrap scores: "
                         f"{score.get('reason', '')}")  # fmt: skip
    return score["bootstrap"]


def probe_baseline(ring: Ring, node: str) -> dict:
    """Run the baseline on every guard view under the probe seeds (planned for every node,
    docs/guard.md#power), score each run on the guard's bootstrap resamples, and estimate
    the guard's power (`ringflow check`'s throwaway ring)."""
    from ..execute import run_execution
    from ..scoring import score_execution
    from .final import guard_views

    runs: dict[str, list[list[float]]] = {}
    for view in guard_views(ring):
        for variant in probe_variants():
            run_execution(ring.ring_dir, node, view, variant)
            score_execution(ring.ring_dir, node, view, variant)
            runs.setdefault(view, []).append(_probe_scores(ring, node, view, variant))
    return _estimate(ring, runs)


def ring_power(ring_dir: str | Path) -> dict:
    """The ring's own estimate, before its guard (selection/power.json): from the
    baseline's probe runs, which the workflow runs beside the search. A probe that failed
    or was cut leaves no estimate, with the reason; it never stops the ring."""
    from ..core.clock import load_ring
    from ..core.jsonio import atomic_write_json, read_json
    from ..core.layout import RingLayout
    from .final import guard_views
    from .order import usable_baseline

    ring = load_ring(ring_dir)
    layout = RingLayout(Path(ring.ring_dir))
    base = usable_baseline(read_json(layout.nodes_index))
    record: dict = {"node": base, "probe_seeds": list(PROBE_SEEDS), "detectable": None}
    try:
        if base is None:
            raise ValueError("no usable baseline")
        runs = {view: [_probe_scores(ring, base, view, v) for v in probe_variants()]
                for view in guard_views(ring)}  # fmt: skip
        record.update(_estimate(ring, runs), reason=None)
    except ValueError as exc:
        record["reason"] = f"no estimate: {exc}"
    atomic_write_json(layout.power, record)
    return record
