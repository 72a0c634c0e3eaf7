"""The ring's health digest (periodic, and at each stage's end): what a person away from
the terminal needs to know, built from the report's figures and the failure digest."""

from __future__ import annotations

from pathlib import Path

from ..core import statuses
from ..core.hints import ringflow_hint
from ..core.layout import RingLayout
from ..core.stop import stopped_reason
from .digest import digest_lines, failure_digest
from .report import base_context, format_duration, health_events, health_figures


def _stage(layout_root: Path, decision: dict | None) -> str:
    if RingLayout(layout_root).stop_manifest.exists():
        return "finished"
    if stopped_reason(layout_root) is not None:
        return "stopped"
    if decision is not None:
        return "decided, finishing"
    if RingLayout(layout_root).search.exists():
        return "final selection"
    return "search"


def ring_digest(ring_root: str | Path, now: float | None = None) -> dict:
    """The digest of a ring right now: its stage, decision, failures, hung executions,
    executions in flight and time left; `text` for a message, `data` for a webhook."""
    ctx, _ = base_context(ring_root, now)
    ring, clock, root = ctx["ring"], ctx["clock"], Path(ctx["root"])
    decision = ctx["decision"]
    hung = []
    for e in ctx["executions"]:
        events = health_events(e)
        if e.status == statuses.HUNG or events.get("would_hang"):
            hung.append({"execution": f"{e.node}/{e.view}/{e.variant}",
                         "status": e.status or "running",
                         "would_hang": events.get("would_hang", 0)})  # fmt: skip
    in_flight = []
    for e in ctx["in_flight"]:
        figures = health_figures(e, prefer_latest=True) or {}
        started = figures.get("started")
        in_flight.append({"execution": f"{e.node}/{e.view}/{e.variant}",
                          "running_s": None if started is None else ctx["now"] - started,
                          "cpu_frac": figures.get("cpu_frac")})  # fmt: skip
    failures = failure_digest(root, (ctx["index"] or {}).get("nodes", []))
    data = {
        "ring_id": ring.ring_id,
        "folder": str(root),
        "stage": _stage(root, decision),
        "decision": None if decision is None else {
            k: decision.get(k) for k in ("decision", "chosen", "baseline", "reason")},
        "to_cutoff_s": clock["to_cutoff"],
        "to_stop_s": clock["to_stop"],
        "failures": [f.line() for f in failures],
        "hung": hung,
        "in_flight": in_flight,
        "executions_done": sum(1 for e in ctx["executions"] if e.result is not None),
    }  # fmt: skip

    def left(seconds):
        if seconds is None:
            return "unknown"
        return format_duration(seconds) if seconds > 0 else "passed"

    if decision is None:
        said = "decision: none yet"
    else:
        said = f"decision: {decision.get('decision')}"
        if decision.get("chosen"):
            said += f" -> {decision['chosen']}"
        said += f" ({decision.get('reason', '')})"
    lines = [
        f"ring {ring.ring_id} ({ring.task.name}): {data['stage']}",
        f"  folder {root}",
        said,
        "time left: none (the ring is over; nothing runs)"
        if data["stage"] == "finished"
        else f"time left: none (the ring stopped: {stopped_reason(root)})"
        if data["stage"] == "stopped"
        else f"time left: to the cutoff {left(clock['to_cutoff'])}, "
        f"to stop_at {left(clock['to_stop'])}",
        f"executions: {data['executions_done']} done, {len(in_flight)} in flight",
    ]
    for item in in_flight:
        running = "?" if item["running_s"] is None else format_duration(item["running_s"])
        lines.append(f"  running {item['execution']} for {running}")
    if hung:
        lines.append(f"hung: {len(hung)} execution(s)")
        lines += [f"  {h['execution']}: {h['status']}, would_hang {h['would_hang']}" for h in hung]
    else:
        lines.append("hung: none")
    lines += digest_lines(failures)
    lines.append(f"report: {root / 'report.html'} ({ringflow_hint('report', Path(root))})")
    return {"ring_id": ring.ring_id, "data": data, "text": "\n".join(lines) + "\n"}
