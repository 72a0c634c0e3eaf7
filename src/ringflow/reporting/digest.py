"""The failure digest: for each node that was rejected, crashed, was invalid or was not
scored, the first line of why (docs/report.md). Summary, status and report all show it, so a
failure is never only inside a score.json or a stderr.log.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from .. import statuses

REJECTED = "rejected"
INVALID = "invalid"
NOT_SCORED = "not scored"
TAIL_BYTES = 8192


@dataclass(frozen=True)
class Failure:
    node: str
    # rejected, crash, hung, timeout, interrupted, invalid, not scored, or "scorer failed" /
    # "validator failed" (the task's own program failed on the output: not the node's fault)
    kind: str
    count: int  # executions with this kind of failure (1 for a rejection)
    example: str  # "view/variant" of the first one ("" for a rejection)
    reason: str  # first line of the reason

    def line(self) -> str:
        where = f" ({self.count}x, e.g. {self.example})" if self.example else ""
        return f"{self.node}: {self.kind}{where}: {self.reason}"


def first_line(text: str | None) -> str:
    for line in (text or "").strip().splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""


def last_line(path: Path) -> str:
    """The last non-empty line of a log (read from its tail only)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - TAIL_BYTES))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


# What ringflow's own refusals and stops look like inside Snakemake's log: a traceback of an
# input function, or a failed job's stderr (`ringflow: error: ...`, `ringflow: ring ...`).
ERROR_LINE = re.compile(
    r"^ringflow: (?:error: )?(.+)$|\b(?:InputError|MachineryError|SandboxError|RingflowError): "
    r"(.+)$",
    re.MULTILINE,
)


def key_error_line(log: Path) -> str:
    """The first line of ringflow's own error in a Snakemake log, or ""."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return ""
    match = ERROR_LINE.search(text)
    return (match.group(1) or match.group(2)).strip()[:400] if match else ""


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def execution_failure(exec_dir: Path, result: dict | None, score: dict | None):
    """(kind, reason) of one finished execution, or None when it ran and was scored valid."""
    if result is None:
        return None
    status = result.get("status")
    if status != statuses.OK:
        if status == statuses.INTERRUPTED and result.get("budget_cut"):
            return None  # cut by the ring's own clock: not the program's failure
        reason = first_line(result.get("reason"))
        tail = last_line(exec_dir / "stderr.log") if status == statuses.CRASH else ""
        if tail and tail not in reason:
            reason = f"{reason}; stderr: {tail}" if reason else f"stderr: {tail}"
        return status, reason or "no reason recorded"
    if score is None:
        return None
    if score.get("budget_cut"):
        return None
    if score.get("evaluator_failed"):
        # The task's own program failed on this output: the task's fault, not the program's.
        which = score["evaluator_failed"]
        return f"{which} failed", first_line(score.get("reason")) or f"the {which} failed"
    if not score.get("valid") and (score.get("scored") or score.get("reason")):
        # Invalid output has no score (a pointer, the validator's or the scorer's verdict,
        # or the scorer failing on it): it is the execution's failure, with its reason.
        return INVALID, first_line(score.get("reason")) or "the scorer gave no reason"
    if not score.get("scored"):
        return NOT_SCORED, first_line(score.get("reason")) or "no reason recorded"
    return None


def failure_digest(ring_root: str | Path, nodes: list[dict] | None = None) -> list[Failure]:
    """Failures per node and kind, in node order; `nodes` as in nodes/index.json."""
    root = Path(ring_root)
    if nodes is None:
        index = _read(root / "nodes" / "index.json") or {}
        nodes = index.get("nodes", [])
    digest: list[Failure] = []
    for node in nodes:
        node_id = node.get("id")
        if node.get("status") == REJECTED:
            record = _read(root / "nodes" / node_id / "node.json") or {}
            reason = first_line(record.get("error") or node.get("error")) or "no reason recorded"
            digest.append(Failure(node_id, REJECTED, 1, "", reason))
            continue
        found: dict[str, list] = {}
        for exec_dir in sorted((root / "nodes" / node_id / "exec").glob("*/*")):
            failure = execution_failure(
                exec_dir, _read(exec_dir / "result.json"), _read(exec_dir / "score.json")
            )
            if failure is not None:
                found.setdefault(failure[0], []).append(
                    (f"{exec_dir.parent.name}/{exec_dir.name}", failure[1])
                )
        for kind, items in found.items():
            digest.append(Failure(node_id, kind, len(items), items[0][0], items[0][1]))
    return digest


def digest_lines(digest: list[Failure]) -> list[str]:
    if not digest:
        return ["failures: none"]
    return ["failures:", *(f"  {f.line()}" for f in digest)]


# ---------------------------------------------------------------------------------------------
# The ring's health digest (periodic, and at each stage's end): what a person away from the
# terminal needs to know.


def _stage(layout_root: Path, decision: dict | None) -> str:
    if (layout_root / "stop_manifest.json").exists():
        return "finished"
    if decision is not None:
        return "decided, finishing"
    if (layout_root / "selection" / "search.json").exists():
        return "final selection"
    return "search"


def ring_digest(ring_root: str | Path, now: float | None = None) -> dict:
    """The digest of a ring right now: its stage, decision, failures, hung executions,
    executions in flight and time left; `text` for a message, `data` for a webhook."""
    from .report import base_context, format_duration, health_events, health_figures

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
        "ring_id": ring["ring_id"],
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
        f"ring {ring['ring_id']} ({ring['task']['name']}): {data['stage']}",
        f"  folder {root}",
        said,
        f"time left: to the cutoff {left(clock['to_cutoff'])}, to stop_at {left(clock['to_stop'])}",
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
    lines.append(f"report: {root / 'report.html'} (ringflow report {root})")
    return {"ring_id": ring["ring_id"], "data": data, "text": "\n".join(lines) + "\n"}
