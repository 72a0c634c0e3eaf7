"""The report's first screen: what the ring decided, how sure it is, who was passed over and
why, where the deployable model is, and what the search cost (docs/report.md).

Everything comes from `selection/decision.json` (or `final/FINAL.json`) and the ring's
own files; a ring still running shows what it has so far.
"""

from __future__ import annotations

from pathlib import Path
from statistics import fmean, stdev

from ..core import statuses
from ..core.hints import ringflow_hint
from ..core.layout import RingLayout
from ..core.state import Ring
from ..selection.incumbent import BASELINE, INCUMBENT
from .numbers import figure


def chosen_in_words(row: dict) -> str:
    """`chosen in mine`, or `chosen in mine as n003-ridge` where mine named it otherwise."""
    said = f"chosen in {row['chosen_in']}"
    return f"{said} as {row['chosen_as']}" if row.get("chosen_as") else said


def history_line(row: dict) -> str:
    """One ring of the incumbent's history, in words."""
    ring, holds = row["ring"], row["holds"]
    if row["decision"] is None and row.get("stopped"):
        return f"{ring}: stopped before its decision: no final/"
    if row["decision"] is None:
        return f"{ring}: no final/ yet"
    if row["decision"] == "candidate":
        gain = ""
        if row["difference"] is not None:
            gain = f" by {figure(row['difference'], sign=True)} on {row['view']}"
            if row["interval"]:
                low, high = row["interval"]
                gain += f" [{figure(low, sign=True)}, {figure(high, sign=True)}]"
            gain += " (positive is better)"
        return f"{ring}: {holds} replaced the {row['against']} {row['reference']}{gain}"
    if row["decision"] == INCUMBENT:
        return f"{ring}: kept the incumbent {holds} ({chosen_in_words(row)})"
    if row["decision"] == BASELINE:
        return f"{ring}: kept the baseline {holds}"
    return f"{ring}: {row['decision']}: nothing in final/"


def guarded_candidate(decision: dict) -> str | None:
    """The candidate whose guard record the decision carries (`guard_of`): the chosen node
    when a candidate won, else the finalist that came closest to passing. A decision
    written before `guard_of` carried the last finalist guarded."""
    if decision.get("decision") == "candidate":
        return decision.get("chosen")
    if "guard_of" in decision:
        return decision["guard_of"]
    guarded = [v for v in decision.get("verdicts") or [] if v.get("guard")]
    return guarded[-1]["node"] if guarded else None


def guard_spread(guard: dict) -> float | None:
    """The standard deviation of the per-seed paired differences (needs two seeds)."""
    diffs = [d for d in guard.get("differences") or [] if d is not None]
    return stdev(diffs) if len(diffs) >= 2 else None


def improvement(decision: dict) -> dict | None:
    """The guarded candidate's advantage over the baseline on the guard views: the mean
    difference, the one-sided bound (LCB) at alpha', and the smallest advantage this guard
    could have told from zero. None when the guard did not run."""
    guard = decision.get("guard") or {}
    if not guard or guard.get("ran") is False or not guard.get("seeds"):
        return None
    boot = guard.get("bootstrap") or {}
    mean = guard.get("mean")
    if mean is None and guard.get("differences"):
        mean = fmean(guard["differences"])
    return {
        "candidate": guarded_candidate(decision),
        # The side it was guarded against: the chain's incumbent, or the baseline.
        "baseline": decision.get("reference", decision.get("baseline")),
        "against": decision.get("guard_against") or "baseline",
        "mean": mean,
        "lcb": guard.get("lcb"),
        "alpha": guard.get("alpha"),
        "margin": guard.get("margin"),
        "detectable": boot.get("detectable"),
        "replicates": boot.get("replicates"),
        "no_bound_reason": boot.get("reason") if guard.get("lcb") is None else None,
        "complete": bool(guard.get("complete")),
        "failed": guard.get("failed"),
        "seeds": len(guard.get("seeds") or []),
        "views": guard.get("views") or [],
        "sd": guard_spread(guard),
    }


def passed_over(decision: dict, ranking: dict | None) -> list[dict]:
    """Every finalist that is not the chosen node, with the verdict that passed it over;
    then the promoted nodes that did not become finalists."""
    chosen = decision.get("chosen")
    rows = []
    for row in decision.get("finalists") or []:
        if row.get("node") == chosen:
            continue
        rows.append({"node": row["node"], "stage": f"finalist #{row.get('rank')}",
                     "why": row.get("verdict") or "-"})  # fmt: skip
    finalists = {r.get("node") for r in decision.get("finalists") or []}
    for position, node in enumerate((ranking or {}).get("finalists") or [], start=1):
        if node not in finalists and node != chosen:
            finalists.add(node)
            rows.append({"node": node, "stage": f"finalist #{position}",
                         "why": "final selection has not decided on it yet"})  # fmt: skip
    ranked = (ranking or {}).get("ranked") or []
    for position, row in enumerate(ranked, start=1):
        node = row.get("node")
        if node in finalists or node == chosen:
            continue
        rows.append({"node": node, "stage": f"promoted, ranked {position}",
                     "why": "not among the finalists (final_top_k): ranked below them on its "
                            "3-seed mean"})  # fmt: skip
    return rows


def deployable(root: Path, decision: dict | None) -> dict:
    """Where the chosen program with its trained weights is, and how to copy it out."""
    solution = RingLayout(root).final_dir / "solution"
    manifest = solution / "MANIFEST.json"
    return {
        "written": solution.is_dir(),
        "solution": str(solution),
        "manifest": str(manifest) if manifest.is_file() else None,
        "final_json": str(RingLayout(root).final_dir / "FINAL.json"),
        "chosen": (decision or {}).get("chosen"),
        "command": f"{ringflow_hint('export', Path(root))} DEST",
    }


def score_queries(root: Path) -> int:
    """Score queries the engineer sessions made (one line each in nodes/*/queries.jsonl)."""
    count = 0
    for path in RingLayout(root).node_files("queries.jsonl"):
        try:
            count += sum(1 for line in path.read_text().splitlines() if line.strip())
        except OSError:
            continue
    return count


def cost(root: Path, executions: list, weights: dict) -> dict:
    """What the search spent: executions by status, their wall and CPU time, trainings
    against replays, and the engineer's score queries."""
    finished = [e for e in executions if e.result is not None]
    by_status: dict[str, int] = {}
    for e in finished:
        by_status[e.status or "?"] = by_status.get(e.status or "?", 0) + 1
    return {
        "executions": len(finished),
        "ok": by_status.get(statuses.OK, 0),
        "by_status": sorted(by_status.items()),
        "wall_s": sum(float(e.result.wall_s or 0.0) for e in finished),
        "cpu_s": sum(float(e.result.cpu_s or 0.0) for e in finished),
        "trainings": weights["trainings"],
        "replays": weights["replays"],
        "score_queries": score_queries(root),
    }


def chain_history(ring: Ring) -> list[str]:
    """A continuation's incumbent, ring by ring, in words (docs/guard.md#the-incumbent)."""
    if not ring.continue_from:
        return []
    from ..core.errors import InputError
    from ..selection.incumbent import history

    try:
        return [history_line(row) for row in history(ring.ring_dir)]
    except InputError:  # an ancestor's lock went missing: the page still renders
        return []


def headline(ctx: dict) -> dict:
    """The first screen's content (see the module docstring)."""
    decision = ctx["decision"] or ctx["final"]
    root = Path(ctx["root"])
    state = "in progress"
    if decision is not None:
        state = {"refused": "refused", "none": "no decision"}.get(
            decision.get("decision"), "decided"
        )
    final_view = (decision or {}).get("final_view") or {}
    chosen_fv, base_fv = final_view.get("chosen"), final_view.get("baseline")
    direction = ctx["ring"].task.direction
    sign = -1.0 if direction == "minimize" else 1.0
    return {
        "state": state,
        "decision": decision,
        "pending": ctx["decision"] is None and decision is not None,
        "chosen": (decision or {}).get("chosen"),
        "baseline": (decision or {}).get("baseline"),
        "against": (decision or {}).get("guard_against") or "baseline",
        "reference": (decision or {}).get("reference", (decision or {}).get("baseline")),
        "came_from": ((decision or {}).get("incumbent") or {}).get("chosen_in"),
        "chain_history": chain_history(ctx["ring"]),
        "improvement": None if decision is None else improvement(decision),
        "final_view": {
            "view": final_view.get("view"),
            "chosen": chosen_fv,
            "baseline": base_fv,
            "difference": None
            if chosen_fv is None or base_fv is None
            else sign * (chosen_fv - base_fv),
        },
        "passed_over": [] if decision is None else passed_over(decision, ctx["ranking"]),
        "deploy": deployable(root, decision),
        "cost": cost(root, ctx["executions"], ctx["weights"]),
    }
