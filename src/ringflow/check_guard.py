"""`ringflow check`'s guard checks: that the scorer resamples its rows (or the task says it
cannot), and the guard's power, estimated from the baseline before a ring spends anything
(docs/guard.md#scorer-modes, docs/guard.md#power)."""

from __future__ import annotations

from .core import statuses
from .core.state import Ring
from .scorer_modes import resample_verdict


def check_resampling(report, ring: Ring, node: str, view: str) -> None:
    """`ringflow check`: score one scored output of `node` on `view` under other seeds and
    fail a scorer whose score does not move, unless the task declares mode (c)."""
    from pathlib import Path

    from .core.layout import RingLayout
    from .scoring import _evaluate, read_score, scorer_mode

    mode = scorer_mode(ring.task)
    report.head("scorer mode (does the guard see which rows are in the guard view?):")
    if mode == "fixed":
        report.warn(
            "scorer_resamples: false: one number per output; the guard will cover the "
            "programs' own noise only, not which rows happen to be in the guard view"
        )
        return
    if mode == "rows":
        report.ok("scorer_rows: true: ringflow draws the row resamples from the guard seeds")
        return
    layout = RingLayout(Path(ring.ring_dir))
    first = read_score(layout, node, view, "s0") or {}
    if not first.get("valid") or first.get("score") is None:
        report.warn("no valid output to score under two seeds: the resampling is not checked")
        return
    exec_dir = layout.exec_dir(node, view, "s0")
    problem = resample_verdict(
        lambda seed: _evaluate(ring, exec_dir, view, "s0", seed), 0, first["score"]
    )
    if problem is None:
        report.ok("the score changes with --seed: the scorer resamples its rows")
    else:
        report.fail(problem)
    if not ring.task.scorer_bootstrap:
        report_bootstrap_cost(report, ring, first.get("scoring_s"))


def report_bootstrap_cost(report, ring: Ring, scoring_s: float | None) -> None:
    """A scorer that draws its own rows without `--bootstrap B` is called once per
    resample on every guard run and on the final view: say what that will cost."""
    count = ring.config.guard.bootstrap
    took = f"{scoring_s:.2g} s" if isinstance(scoring_s, int | float) else "one call"
    each = f", about {count * scoring_s:.0f} s" if isinstance(scoring_s, int | float) else ""
    report.warn(
        f"no scorer_bootstrap: the guard scores each of its runs, and each final-view run, "
        f"{count} more times (guard.bootstrap, one scorer call per resample; scoring took "
        f"{took} here{each} per run); a scorer that takes --bootstrap B and writes "
        '"bootstrap": [...] does it in one call (scorer_bootstrap: true in task.yaml, '
        "docs/contracts.md#scorer)"
    )


def report_power(report, ring: Ring, index: dict) -> None:
    """`ringflow check --baseline DIR`: the guard's power, estimated before the ring."""
    from .core.errors import RingflowError
    from .selection.power import probe_baseline

    views = "view" if len(ring.guard_views) == 1 else "views"
    report.head(f"power of the guard (the baseline on the guard {views}, probe seeds):")
    base = index.get("baseline")
    ready = {n["id"] for n in index["nodes"] if n["status"] == statuses.READY}
    if base is None:
        report.warn("skipped: no baseline given (--baseline DIR)")
        return
    if base not in ready:
        # Its import check has failed the check already, with the reason.
        report.warn(f"skipped: the baseline {base} was rejected at import (see above)")
        return
    try:
        power = probe_baseline(ring, base)
    except (RingflowError, ValueError) as exc:
        report.fail(f"no estimate: {exc}")
        return
    report.ok(
        f"smallest advantage the guard could detect: {power['detectable']:.4g} "
        f"({len(ring.guard_seeds)} guard seeds, alpha' {power['alpha_prime']:.3g}; row SD "
        f"{power['row_sd']:.3g}, seed SD {power['seed_sd']:.3g}); raise guard.seeds or add "
        "guard rows to detect less"
    )
