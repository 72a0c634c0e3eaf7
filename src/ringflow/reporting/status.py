"""`ringflow status`: a live text view of a ring (docs/operations.md#while-a-ring-runs).

Nodes with their seed-0 means and execution counts, the executions in flight with their
latest health figures, the time left to the live cutoff and to stop_at, the current final
reserve, and the decision once made. It reads only files, so it works on a running ring.
"""

from __future__ import annotations

from pathlib import Path

from ..core.safetext import printable
from ..core.stop import stopped_reason
from ..ring.lease import describe_holder, driver_now
from .digest import digest_lines, failure_digest
from .headline import guarded_candidate
from .numbers import figure
from .report import (
    Execution,
    base_context,
    format_bytes,
    format_duration,
    format_states,
    format_time,
    health_figures,
)
from .summary import node_happened


def _until(target: float | None, now: float) -> str:
    """'in 12m03s' or 'passed 3m00s ago'."""
    if target is None:
        return "unknown"
    left = target - now
    return f"in {format_duration(left)}" if left >= 0 else f"passed {format_duration(-left)} ago"


def _table(header: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(cells):
        return "  ".join(
            str(c).rjust(w) if i in right else str(c).ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return [line(header), *(line(r) for r in rows)]


def _finished_at(ctx: dict) -> float | None:
    """When the ring finished (its final decision made, nothing in flight), else None."""
    decision = ctx["decision"]
    if decision is None or ctx["in_flight"]:
        return None
    return decision.get("decided_at") or ctx["clock"]["cutoff"]


def _clock_lines(clock: dict, now: float, finished: float | None = None) -> list[str]:
    if finished is not None:
        return [
            f"  finished {format_time(finished)}  ({format_duration(now - finished)} ago)",
            f"  cutoff   {format_time(clock['cutoff'])}  (the ring is over; nothing runs)",
        ]
    moved = f", moved earlier {clock['moves']}x" if clock["moves"] else ""
    source = "live" if clock["live"] else "initial: cutoff.json not written"
    reserve = "-" if clock["reserve_min"] is None else format_duration(60 * clock["reserve_min"])
    if clock["estimate_s"] is not None:
        reserve += f" (measured estimate {format_duration(clock['estimate_s'])})"
    return [
        f"  cutoff   {format_time(clock['cutoff'])}  {_until(clock['cutoff'], now)}"
        f"  ({source}{moved})",
        f"  stop_at  {format_time(clock['stop_at'])}  {_until(clock['stop_at'], now)}",
        f"  reserve  {reserve}",
    ]


def _driver_lines(root: Path) -> list[str]:
    """Whether anything drives the unfinished ring now: its clock runs on either way."""
    state, record = driver_now(root)
    if state == "running":
        return [f"  driver   running ({describe_holder(record)})"]
    if state == "elsewhere":
        return [f"  driver   on another host ({describe_holder(record)}); not checked from here"]
    return ["  driver   none: nothing runs until the ring's command is run again (it resumes)"]


def _in_flight_row(execution: Execution, now: float) -> list[str]:
    figures = health_figures(execution, prefer_latest=True)
    if figures is None:
        return [execution.node, execution.view, execution.variant, "-", "-", "-", "-", "-", "-"]
    started = figures["started"]
    age = None if figures["wall"] is None else now - figures["wall"]
    return [
        execution.node,
        execution.view,
        execution.variant,
        format_duration(None if started is None else now - started),
        figure(figures["cpu_frac"], 2),
        figure(figures["io_kbps"], 1),
        format_bytes(figures["rss_bytes"]),
        format_states(figures["states"]),
        format_duration(age),
    ]


def _decision_lines(ctx: dict) -> list[str]:
    decision = ctx["decision"]
    if decision is None:
        if ctx["final"] is not None:
            seated = ctx["final"]
            # The chain's incumbent where the ring continues one, else the baseline.
            role = seated.get("decision") if seated.get("decision") == "incumbent" else "baseline"
            return [f"final decision: pending ({role} {seated.get('chosen')} seated)"]
        return ["final decision: not made yet"]
    chosen = decision.get("chosen")
    lines = [f"final decision: {decision.get('decision')}" + (f" -> {chosen}" if chosen else "")]
    if decision.get("reason"):
        lines.append(f"  {decision['reason']}")
    guard = decision.get("guard") or {}
    if guard.get("lcb") is not None:
        of = guarded_candidate(decision)
        lines.append(
            f"  guard{f' of {of}' if of else ''}: LCB {figure(guard['lcb'])} at alpha "
            f"{guard.get('alpha', 0):.4g}, margin {guard.get('margin')}, "
            f"complete {guard.get('complete')}"
        )
    return lines


def _happened(ctx: dict, failures: list) -> dict[str, str]:
    """Each node's runs so far in the summary's words (`ok 3/4, crashed 1/4`), its import
    state (`rejected`) where it has none to run."""
    nodes = (ctx["index"] or {}).get("nodes", [])
    return {
        node["id"]: node_happened(
            node,
            [e.result for e in ctx["executions"] if e.node == node["id"] and e.result],
            [f for f in failures if f.node == node["id"]],
        )
        for node in nodes
    }


def render_status(ring_dir: str | Path, now: float | None = None) -> str:
    """The ring's live status as text; `now` (epoch seconds) defaults to the current time."""
    ctx, files = base_context(ring_dir, now)
    now, ring = ctx["now"], ctx["ring"]
    task = ring.task
    stopped = stopped_reason(ctx["root"])
    lines = [
        f"ring {ring.ring_id}  task {task.name} ({task.direction})  at {format_time(now)}",
        *(_clock_lines(ctx["clock"], now, _finished_at(ctx)) if stopped is None else [
            f"  stopped  {stopped}",
            "           (nothing runs; run the ring's Snakemake command again for the way on)",
        ]),
        *(_driver_lines(ctx["root"]) if stopped is None and _finished_at(ctx) is None else []),
        "",
    ]  # fmt: skip
    failures = failure_digest(ctx["root"], (ctx["index"] or {}).get("nodes", []))
    happened = _happened(ctx, failures)
    rows = [
        [n["id"], n["role"], happened.get(n["id"], n["status"]), figure(n["s0"]),
         str(n["done"]), str(n["running"])]
        for n in ctx["node_rows"]
    ]  # fmt: skip
    if rows:
        lines += _table(
            ["node", "role", "what happened", "s0 mean", "done", "in flight"], rows,
            right={3, 4, 5},
        )  # fmt: skip
    else:
        lines.append("no nodes yet")
    lines.append("")
    flying = ctx["in_flight"]
    lines.append(f"in flight: {len(flying)}")
    if flying:
        lines += _table(
            [
                "node",
                "view",
                "variant",
                "running",
                "cpu",
                "io KiB/s",
                "rss",
                "states",
                "health age",
            ],
            [_in_flight_row(e, now) for e in flying],
            right={3, 4, 5, 6, 8},
        )
    lines += ["", *digest_lines(failures)]
    lines += ["", *_decision_lines(ctx)]
    if files.problems:
        lines += ["", "unreadable files:", *(f"  {p}" for p in files.problems)]
    # Reasons quote what programs wrote: no escape sequence reaches a terminal.
    return printable("\n".join(lines), keep_newlines=True) + "\n"
