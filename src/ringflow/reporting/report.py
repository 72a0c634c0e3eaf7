"""`ringflow report`: one self-contained HTML page of a ring, finished or in progress
(docs/report.md).

The page is built from the files the ring writes and nothing else; any of them may be
missing while the ring runs, so every section shows what exists. Data is gathered here
(`report_context`) and laid out by the Jinja2 template, which escapes every value.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean
from typing import Any

from jinja2 import Environment, PackageLoader

from ..core import statuses
from ..core.clock import load_ring
from ..core.errors import InputError
from ..core.jsonio import atomic_write_text, jsonl_objects, read_json
from ..core.layout import SEARCH_VARIANTS, RingLayout
from ..core.node_state import ExecutionResult, Node
from ..core.state import Ring
from ..scoring import usable
from ..search.best_so_far import ring_progress
from ..selection.gap import selection_gap as gap_of
from ..selection.scores import node_mean
from .charts import Chart
from .digest import failure_digest
from .headline import guard_spread, guarded_candidate, headline
from .numbers import figure

HEALTH_EVENTS = ("would_hang", "busy_no_progress")
LATE_VARIANTS = ("blind-s0", "blind2-s0", "fresh-s0")


# ---------------------------------------------------------------------------------------------
# Reading a ring that may be half-written


@dataclass
class RingFiles:
    """Reads a ring's files, tolerating absence; unreadable files are listed, not fatal.

    A report or status of a live ring must not fail because one file is malformed: the
    problem is shown instead, next to everything that could be read.
    """

    root: Path
    problems: list[str] = field(default_factory=list)

    def json(self, path: Path) -> Any | None:
        if not path.exists():
            return None
        try:
            return read_json(path)
        except (InputError, OSError) as exc:
            self.problems.append(str(exc))
            return None

    def result(self, path: Path) -> ExecutionResult | None:
        """A result.json, typed; one that is not a result is listed like a malformed file."""
        return self._typed(ExecutionResult, path)

    def node(self, path: Path) -> Node | None:
        """A node.json, typed; one that is not a node is listed like a malformed file."""
        return self._typed(Node, path)

    def _typed(self, cls, path: Path):
        record = self.json(path)
        if record is None:
            return None
        try:
            return cls.from_record(record, source=path)
        except InputError as exc:
            self.problems.append(str(exc))
            return None

    def jsonl(self, path: Path) -> list[dict]:
        """Every whole line; a line being appended at this moment is skipped, not an error."""
        try:
            text = path.read_text()
        except FileNotFoundError:
            return []
        except OSError as exc:
            self.problems.append(f"{path}: {exc}")
            return []
        return jsonl_objects(text)


@dataclass
class Execution:
    """One exec folder: its result, score and health files, whichever exist."""

    node: str
    view: str
    variant: str
    path: Path
    result: ExecutionResult | None
    score: dict | None
    latest: dict | None
    lines: list[dict]

    @property
    def in_flight(self) -> bool:
        return self.result is None and self.latest is not None

    @property
    def status(self) -> str | None:
        return None if self.result is None else self.result.status

    @property
    def last_line(self) -> dict | None:
        return self.lines[-1] if self.lines else None


def scan_executions(files: RingFiles) -> list[Execution]:
    """Every exec folder of the ring, finished or not, in node/view/variant order."""
    found = []
    for node, view, variant, exec_dir in RingLayout(files.root).executions():
        health = exec_dir / "health"
        found.append(
            Execution(
                node=node,
                view=view,
                variant=variant,
                path=exec_dir,
                result=files.result(exec_dir / "result.json"),
                score=files.json(exec_dir / "score.json"),
                latest=files.json(health / "health_latest.json"),
                lines=files.jsonl(health / "health.jsonl"),
            )
        )
    return found


def load_nodes(files: RingFiles, layout: RingLayout, index: dict | None) -> list[dict]:
    """The ring's nodes: the index's entries merged with each node.json (either may lack)."""
    entries = list(index.get("nodes", [])) if index else []
    known = {n.get("id") for n in entries}
    for path in layout.node_files("node.json"):
        if path.parent.name not in known:
            entries.append({"id": path.parent.name})
    nodes = []
    for entry in entries:
        node = files.node(layout.node_json(entry["id"]))
        record = node.to_record() if node is not None else {}
        nodes.append({**record, **{k: v for k, v in entry.items() if v is not None}})
    return nodes


def health_events(execution: Execution) -> Counter:
    """Health events of one execution, from result.json and every health line, each once."""
    seen, counts = set(), Counter()
    sources = [(execution.result.events or []) if execution.result else []]
    sources += [line.get("events") or [] for line in execution.lines]
    for events in sources:
        for event in events:
            if not isinstance(event, dict) or "event" not in event:
                continue
            ident = (event["event"], event.get("wall"))
            if ident not in seen:
                seen.add(ident)
                counts[event["event"]] += 1
    return counts


def health_figures(execution: Execution, prefer_latest: bool = False) -> dict | None:
    """cpu, io, rss and thread states of the latest health line (or the latest sample).

    The report summarises with the last health.jsonl line (maxima over an interval); a live
    status prefers health_latest.json, which is rewritten at every sample.
    """
    line, latest = execution.last_line, execution.latest
    sample = (latest or {}).get("sample") or None
    window = (latest or {}).get("window") or None
    from_latest = None
    if sample is not None:
        from_latest = {
            "source": "latest sample",
            "cpu_frac": None if window is None else window.get("cpu_frac"),
            "io_kbps": None if window is None else window.get("io_kbps"),
            "rss_bytes": sample.get("rss_bytes"),
            "states": sample.get("thread_states") or {},
            "wall": sample.get("wall"),
        }
    from_line = None
    if line is not None:
        from_line = {
            "source": "health line",
            "cpu_frac": line.get("cpu_frac_avg"),
            "io_kbps": line.get("io_kbps_max"),
            "rss_bytes": line.get("rss_bytes_max"),
            "states": line.get("thread_states_max") or {},
            "wall": line.get("end"),
        }
    first, second = (from_latest, from_line) if prefer_latest else (from_line, from_latest)
    figures = first or second
    if figures is None:
        return None
    figures["started"] = (latest or {}).get("started") or (line or {}).get("start")
    figures["state"] = (latest or {}).get("state")
    figures["lines"] = len(execution.lines)
    return figures


def format_states(states: dict) -> str:
    return " ".join(f"{k}{v}" for k, v in sorted(states.items())) or "-"


def format_bytes(value) -> str:
    if value is None:
        return "-"
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{int(value)} B"


def format_duration(seconds: float | None) -> str:
    """1h02m03s / 4m05s / 6s; negative durations keep their sign."""
    if seconds is None:
        return "-"
    sign = "-" if seconds < 0 else ""
    s = round(abs(seconds))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    if h:
        return f"{sign}{h}h{m:02d}m{sec:02d}s"
    if m:
        return f"{sign}{m}m{sec:02d}s"
    return f"{sign}{sec}s"


def format_time(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch))


# ---------------------------------------------------------------------------------------------
# Sections


def _better(direction: str):
    return (lambda a, b: a > b) if direction == "maximize" else (lambda a, b: a < b)


def _score_value(execution: Execution | None, direction: str) -> float | None:
    return None if execution is None else usable(execution.score, direction)


def _score_cell(execution: Execution | None, direction: str) -> dict:
    """What one seed's score cell shows: the score, or why there is none."""
    if execution is None:
        return {"text": "–", "cls": "absent", "title": "not run"}
    if execution.result is None:
        if execution.in_flight:
            return {"text": "running", "cls": "running", "title": "in flight"}
        return {"text": "pending", "cls": "running", "title": "no result yet"}
    status = execution.status
    if status != statuses.OK:
        cut = " (budget cut)" if execution.result.budget_cut else ""
        return {
            "text": f"{status}{cut}",
            "cls": "bad",
            "title": execution.result.reason or status,
        }
    score = execution.score
    if score is None:
        return {"text": "ok, unscored", "cls": "running", "title": "score.json not written yet"}
    value = usable(score, direction)
    if not score.get("scored"):
        return {"text": "not scored", "cls": "bad", "title": score.get("reason", "")}
    if not score.get("valid"):
        return {
            "text": f"{figure(score.get('score'))} invalid",
            "cls": "bad",
            "title": score.get("reason", ""),
        }
    return {"text": figure(value), "cls": "ok", "title": ""}


def _variant_columns(ring: Ring, found: set[str]) -> list[str]:
    planned = [*SEARCH_VARIANTS, *(f"g{s}" for s in ring.guard_seeds), *LATE_VARIANTS]
    return planned + sorted(found - set(planned))


def _node_mean(by_key: dict, node: str, views: list[str], variant: str, direction: str):
    values = [_score_value(by_key.get((node, v, variant)), direction) for v in views]
    return None if not values or any(v is None for v in values) else fmean(values)


# Node statuses that say nothing went wrong; any other (rejected, stalled, ...) is a failure.
NODE_STATUS_CLASS = {
    statuses.READY: "ok",
    statuses.HISTORY: "muted",  # imported from an earlier ring whose scores are not comparable
    statuses.CARRIED_OVER: "running",  # sealed for the next ring
    statuses.ENGINEERING: "running",
}


def node_origin(node: dict) -> str:
    """baseline, static, draft/improve (with the generation), resume or imported."""
    if node.get("role") == "baseline":
        return "baseline"
    origin = node.get("origin") or {}
    kind = origin.get("kind") or "static"
    if kind in ("draft", "improve") and origin.get("generation") is not None:
        return f"{kind} g{origin['generation']}"
    return kind


def node_lineage(node: dict) -> str:
    """Where the node's program came from: its parent node, the earlier ring's node it
    resumes or imports, or the folder it was read from."""
    origin = node.get("origin") or {}
    kind = origin.get("kind")
    if kind in ("resume", "imported") and origin.get("ring"):
        return f"from {origin['ring']}#{origin.get('node') or origin.get('identity') or '?'}"
    if kind == "resume":
        segments = (node.get("resume_origin") or {}).get("segments") or []
        if segments:
            return "from " + " → ".join(
                f"{s.get('ring', '?')}#{s.get('node', '?')}" for s in segments
            )
        return f"resumes {origin.get('identity') or 'carried-over work'}"
    if node.get("parent"):
        return f"child of {node['parent']}"
    if origin.get("path"):
        return f"folder {Path(origin['path']).name}/"
    return "no parent"


def node_rows(ctx: dict) -> list[dict]:
    ring, nodes, by_key = ctx["ring"], ctx["nodes"], ctx["by_key"]
    views, direction = ring.search_views, ring.task.direction
    promoted = set((ctx["promotion"] or {}).get("promoted", []))
    finalists = set((ctx["ranking"] or {}).get("finalists", []))
    ranked = {r["node"]: r["score"] for r in (ctx["ranking"] or {}).get("ranked", [])}
    chosen = (ctx["decision"] or {}).get("chosen")
    rows = []
    for node in nodes:
        nid = node["id"]
        seeds = [_node_mean(by_key, nid, views, v, direction) for v in ("s0", "s1", "s2")]
        if (
            seeds[0] is None
            and node.get("status") == statuses.READY
            and ring.search_hash is not None
        ):
            # An imported node's comparable seed-0 scores stand in for runs of its own, as
            # promotion and the terminal summary count them.
            seeds[0] = node_mean(ring, RingLayout(Path(ctx["root"])), nid, "s0")["mean"]
        three = ranked.get(nid)
        if three is None and all(s is not None for s in seeds):
            three = fmean(seeds)
        done = sum(1 for e in ctx["executions"] if e.node == nid and e.result is not None)
        running = sum(1 for e in ctx["executions"] if e.node == nid and e.in_flight)
        marks = [
            m
            for m, on in (
                ("promoted", nid in promoted),
                ("finalist", nid in finalists),
                ("chosen", nid == chosen),
            )
            if on
        ]
        rows.append(
            {
                "id": nid,
                "role": node.get("role", "-"),
                "origin": node_origin(node),
                "lineage": node_lineage(node),
                "status": node.get("status", "-"),
                "status_class": NODE_STATUS_CLASS.get(node.get("status"), "bad"),
                "error": node.get("error"),
                "s0": seeds[0],
                "three": three,
                "marks": marks,
                "done": done,
                "running": running,
            }
        )
    return rows


def score_tables(ctx: dict) -> list[dict]:
    """One table per view: every node's score per seed (the final view has seed 0 only)."""
    ring, by_key = ctx["ring"], ctx["by_key"]
    direction = ring.task.direction
    final_view = ring.final_view
    found = {e.variant for e in ctx["executions"]}
    columns = _variant_columns(ring, found)
    views = list(ring.search_views)
    views += [v for v in sorted({e.view for e in ctx["executions"]}) if v not in views]
    tables = []
    for view in views:
        cols = (
            ["s0"]
            if view == final_view
            else [
                c
                for c in columns
                if any((n["id"], view, c) in by_key for n in ctx["nodes"]) or c in ("s0",)
            ]
        )
        rows = []
        for node in ctx["nodes"]:
            cells = [_score_cell(by_key.get((node["id"], view, c)), direction) for c in cols]
            if any(c["cls"] != "absent" for c in cells):
                rows.append({"node": node["id"], "cells": cells})
        labels = [("final view s0" if view == final_view else c) for c in cols]
        tables.append({"view": view, "final": view == final_view, "columns": labels, "rows": rows})
    return tables


def weights_summary(ctx: dict) -> dict:
    modes = (statuses.TRAIN, statuses.REPLAY, statuses.FRESH, statuses.NONE)
    per_node, total = {}, Counter()
    trained_keys: Counter = Counter()
    used_keys: set[str] = set()
    for e in ctx["executions"]:
        if e.result is None:
            continue
        mode = e.result.weights_mode or statuses.NONE
        per_node.setdefault(e.node, Counter())[mode] += 1
        total[mode] += 1
        key = e.result.weights_key
        if key:
            used_keys.add(key)
            if mode == statuses.TRAIN:
                trained_keys[key] += 1
    rows = [{"node": n, "counts": [per_node[n][m] for m in modes]} for n in sorted(per_node)]
    index_keys = (ctx["index"] or {}).get("keys", {})
    return {
        "modes": modes,
        "rows": rows,
        "total": [total[m] for m in modes],
        "trainings": total[statuses.TRAIN],
        "replays": total[statuses.REPLAY],
        "distinct_keys": len(used_keys),
        "trained_keys": len(trained_keys),
        "retrained": sorted(k for k, c in trained_keys.items() if c > 1),
        "planned_keys": len(index_keys),
        "keys_from_store": sum(1 for k in index_keys.values() if k.get("in_store")),
    }


# Execution statuses that mean the program hung, crashed or ran into a limit.
TROUBLE = (statuses.HUNG, statuses.CRASH, statuses.TIMEOUT)


def attention_reason(execution: Execution, events: Counter) -> str:
    """Why an execution needs a look (it hung, crashed, hit a limit or raised a health
    event), or "" when it ran quietly."""
    result = execution.result
    reason = str((result and result.reason) or "")
    cut = bool(result and result.budget_cut)
    if execution.status in TROUBLE:
        return f"{execution.status}: {reason.splitlines()[0] if reason else 'no reason'}"
    if execution.status == statuses.INTERRUPTED and not cut:
        return f"interrupted: {reason.splitlines()[0] if reason else 'no reason'}"
    if "limit" in reason.lower() and not cut:
        return reason.splitlines()[0]
    if cut:
        # Cut by the ring's own clock (carried over, shown under lineage): not the program's.
        events = Counter({k: v for k, v in events.items() if k != "deadline"})
    if events:
        return "health events: " + ", ".join(f"{k} {v}" for k, v in sorted(events.items()))
    return ""


def health_summary(ctx: dict) -> dict:
    rows, totals = [], Counter()
    for e in ctx["executions"]:
        events = health_events(e)
        totals.update(events)
        figures = health_figures(e)
        why = attention_reason(e, events)
        rows.append(
            {
                "node": e.node,
                "view": e.view,
                "variant": e.variant,
                "status": e.status or ("running" if e.in_flight else "pending"),
                "wall_s": e.result and e.result.wall_s,
                "cpu_s": e.result and e.result.cpu_s,
                "figures": figures,
                "states": format_states(figures["states"]) if figures else "-",
                "rss": format_bytes(figures["rss_bytes"]) if figures else "-",
                "would_hang": events.get("would_hang", 0),
                "busy_no_progress": events.get("busy_no_progress", 0),
                "other": ", ".join(
                    f"{k} {v}" for k, v in sorted(events.items()) if k not in HEALTH_EVENTS
                ),
                "attention": why,
            }
        )
    flagged = {name: sum(1 for r in rows if r[name]) for name in HEALTH_EVENTS}
    attention = [r for r in rows if r["attention"]]
    return {
        "rows": rows,
        "attention": attention,
        "quiet": [r for r in rows if not r["attention"]],
        "totals": {n: totals.get(n, 0) for n in HEALTH_EVENTS},
        "flagged": flagged,
    }


def curve(ctx: dict, width: int = 640, height: int = 270) -> dict:
    """Best-so-far against wall time since the ring's start, drawn as inline SVG data.

    One point per seed-0 result on a search view (failed ones as crosses on the axis); the
    step line is the best node's seed-0 mean, counted from when its last view's seed 0 ended.
    """
    ring, by_key = ctx["ring"], ctx["by_key"]
    start, direction = ring.start, ring.task.direction
    views = list(ring.search_views)
    better = _better(direction)
    points, fails = [], []
    for e in ctx["executions"]:
        if e.variant != "s0" or e.view not in views or e.result is None:
            continue
        t = (e.result.ended_at or start) - start
        value = _score_value(e, direction)
        item = {
            "t": t,
            "node": e.node,
            "view": e.view,
            "score": value,
            "vclass": f"v{views.index(e.view) % 6}",
            "status": e.status,
        }
        (fails if value is None else points).append(item)
    node_means = []
    for node in {e.node for e in ctx["executions"]}:
        mean = _node_mean(by_key, node, views, "s0", direction)
        if mean is not None:
            ended = max(by_key[(node, v, "s0")].result.ended_at or start for v in views)
            node_means.append({"t": ended - start, "score": mean, "node": node})
    node_means.sort(key=lambda r: (r["t"], r["node"]))
    steps, best = [], None
    for row in node_means:
        if best is None or better(row["score"], best["score"]):
            best = row
            steps.append(row)
    values = [p["score"] for p in points] + [s["score"] for s in steps]
    times = [p["t"] for p in points + fails] + [s["t"] for s in steps]
    data = {"points": [], "fails": [], "path": "", "markers": [],
            "legend": [{"view": v, "vclass": f"v{i % 6}"} for i, v in enumerate(views)],
            "count": len(points) + len(fails), "best": best, "empty": not times}  # fmt: skip
    if not times:
        return data
    chart = Chart(
        width,
        height,
        max(times),
        values,
        ylabel=score_label(ring.task.direction, "seed-0 score"),
    )
    data.update(chart.frame())
    data["points"] = [{**p, "x": chart.x(p["t"]), "y": chart.y(p["score"])} for p in points]
    data["fails"] = [{**f, "x": chart.x(f["t"]), "y": chart.bottom} for f in fails]
    data["path"] = chart.step_path(steps, until=max(times))
    return data


def score_label(direction: str, what: str) -> str:
    better = "higher" if direction == "maximize" else "lower"
    return f"{what} ({better} is better)"


def best_so_far_curve(progress: dict, width: int = 620, height: int = 250) -> dict:
    """The ring's best-so-far curve on the proxy view (`search.best_so_far.ring_progress`:
    seed-0 executions and background evaluations alike) against wall time, with the time
    to the first valid result marked; laid out as inline SVG data."""
    points, steps = progress["points"], progress["steps"]
    data = {"points": [], "path": "", "markers": [], "empty": not points}
    if not points:
        return data
    end = max(p["t"] for p in points)
    ylabel = score_label(progress["direction"], f"score on {progress['view']}")
    chart = Chart(width, height, end, [p["score"] for p in points], ylabel=ylabel)
    data.update(chart.frame())
    data["points"] = [{**p, "x": chart.x(p["t"]), "y": chart.y(p["score"])} for p in points]
    data["path"] = chart.step_path(steps, until=end)
    first = progress["first_valid"]
    data["markers"] = [chart.marker(first["t"], f"first valid {format_duration(first['t'])}")]
    return data


def selection_gap(ctx: dict) -> dict:
    """The ring's choice against the best node on the final view (nodes that ran there),
    by the one definition FINAL.json uses (`ringflow.selection.gap`)."""
    ring = ctx["ring"]
    direction, view = ring.task.direction, ring.final_view
    rows = []
    for e in ctx["executions"]:
        if e.view == view and e.variant == "s0":
            value = _score_value(e, direction)
            if value is not None:
                rows.append({"node": e.node, "score": value})
    rows.sort(key=lambda r: (-r["score"] if direction == "maximize" else r["score"], r["node"]))
    chosen = (ctx["decision"] or {}).get("chosen")
    shared = gap_of(chosen, {r["node"]: r["score"] for r in rows}, direction)
    best = rows[0] if rows else None
    return {
        "view": view,
        "rows": rows,
        "chosen": chosen,
        "chosen_score": shared["chosen_score"],
        "best": best,
        "gap": shared["gap"],
        "compared": len(shared["compared"]),
        "direction": direction,
    }


def decision_section(ctx: dict, files: RingFiles, layout: RingLayout) -> dict | None:
    decision = ctx["decision"] or ctx["final"]
    if decision is None:
        return None
    guard = decision.get("guard") or None
    if guard and guard.get("ran") is False:
        guard = None  # FINAL.json always has a guard record; this one did not run
    guard_rows = []
    if guard:
        diffs = guard.get("differences") or [None] * len(guard.get("seeds", []))
        guard_rows = [
            {"seed": s, "candidate": c, "baseline": b, "difference": d}
            for s, c, b, d in zip(
                guard.get("seeds", []),
                guard.get("candidate", []),
                guard.get("baseline", []),
                diffs,
                strict=False,
            )
        ]
    verdicts = decision.get("verdicts")
    if verdicts is None:
        paths = layout.verdicts()
        verdicts = [v for v in (files.json(p) for p in paths) if v]
        verdicts.sort(key=lambda v: v.get("rank", 0))
    reviews = (
        [r for r in (files.json(p) for p in layout.reviews()) if r] or decision.get("reviews") or []
    )
    # The winner's-curse table shows the finalist it is about (the chosen one, or the top
    # guarded finalist when the baseline stays), never the baseline's own numbers.
    curse = decision.get("winners_curse") or {}
    curse_row = next(
        (r for r in decision.get("finalists") or [] if r.get("node") == curse.get("node")), None
    )
    if curse_row is not None:
        promo, guard_mean = curse_row.get("promotion_mean"), curse_row.get("guard_mean")
    else:
        promo, guard_mean = decision.get("promotion_mean"), decision.get("guard_mean")
    n_seeds = len(ctx["ring"].guard_seeds)
    note = decision.get("note") or (
        "Guard and promotion scores are conditional on the frozen weights and the current data. "
        f"With {n_seeds} guard seeds only large effects pass reliably."
    )
    curse = [
        {**row, "chosen": row.get("node") == decision.get("chosen")}
        for row in decision.get("finalists") or []
        if row.get("guard_mean") is not None or row.get("node") == decision.get("chosen")
    ]
    return {
        "record": decision,
        "guard_candidate": guarded_candidate(decision),
        "guard_sd": None if not guard else guard_spread(guard),
        "source": "selection/decision.json" if ctx["decision"] else "final/FINAL.json",
        "pending": ctx["decision"] is None,
        "guard": guard,
        "guard_rows": guard_rows,
        "verdicts": verdicts,
        "reviews": reviews,
        "promotion_mean": promo,
        "guard_mean": guard_mean,
        "curse": curse,
        "passed_over": decision.get("passed_over") or [],
        "shrinkage": None if promo is None or guard_mean is None else guard_mean - promo,
        "final_view": decision.get("final_view"),
        "note": note,
    }


def lineage(ctx: dict, files: RingFiles, layout: RingLayout) -> dict:
    carried = [
        {
            "id": n["id"],
            "kind": (n.get("carryover") or {}).get("kind", n.get("carry_kind")),
            "reason": n.get("reason") or n.get("error") or "",
            "sealed": (layout.node_dir(n["id"]) / "carryover" / "SEAL.json").exists(),
        }
        for n in ctx["nodes"]
        if n.get("status") == statuses.CARRIED_OVER
    ]
    carried_execs = [
        {
            "node": e.node,
            "view": e.view,
            "variant": e.variant,
            "reason": e.result.reason if e.result and e.result.reason is not None else "",
        }
        for e in ctx["executions"]
        if e.status == statuses.CARRIED_OVER
        or (e.status == statuses.INTERRUPTED and e.result and e.result.budget_cut)
    ]
    resumed = [
        {"id": n["id"], "segments": (n.get("resume_origin") or {}).get("segments", [])}
        for n in ctx["nodes"]
        if n.get("resume_origin") or (n.get("origin") or {}).get("kind") == "resume"
    ]
    return {
        "continue_from": ctx["ring"].continue_from,
        "carried": carried,
        "carried_execs": carried_execs,
        "resumed": resumed,
        "stop_manifest": files.json(layout.stop_manifest),
    }


def event_summary(ctx: dict) -> dict:
    start = ctx["ring"].start
    counts = Counter(e.get("kind", "?") for e in ctx["events"])
    notable = [
        {
            "after_s": (e.get("ts") or start) - start,
            "kind": e.get("kind", "?"),
            "detail": json.dumps(
                {k: v for k, v in e.items() if k not in ("ts", "kind")}, sort_keys=True
            ),
        }
        for e in ctx["events"]
        if e.get("kind") != "execution_finished"
    ]
    return {"counts": sorted(counts.items()), "notable": notable}


def clock(ring: Ring, cutoff_state: dict | None, now: float) -> dict:
    """Start, cutoff (live when cutoff.json exists), stop_at and the reserve, all as epochs."""
    cutoff = (cutoff_state or {}).get("cutoff", ring.initial_cutoff)
    history = (cutoff_state or {}).get("history", [])
    return {
        "start": ring.start,
        "initial_cutoff": ring.initial_cutoff,
        "cutoff": cutoff,
        "stop_at": ring.stop_at,
        "moves": max(0, len(history) - 1),
        "reserve_min": (cutoff_state or {}).get("reserve_min"),
        "estimate_s": (cutoff_state or {}).get("estimate_s"),
        "live": cutoff_state is not None,
        "to_cutoff": None if cutoff is None else cutoff - now,
        "to_stop": None if ring.stop_at is None else ring.stop_at - now,
    }


def stage_times(root: Path) -> dict | None:
    """Per stage of final selection, the time reserved when the search ended and the time
    it took (timekeeper.stage_timing); None before the search ended."""
    from ..selection.timekeeper import stage_timing

    layout = RingLayout(root)
    if not layout.search.exists():
        return None
    return stage_timing(load_ring(root), layout)


def base_context(ring_dir: str | Path, now: float | None = None) -> tuple[dict, RingFiles]:
    """The ring's files as they are right now: lock, nodes, executions, selection, clock."""
    now = time.time() if now is None else now
    root = Path(ring_dir).resolve()
    ring = load_ring(root)
    # The folder given is the ring; RING.json's own ring_dir may name where it was created.
    layout = RingLayout(root)
    files = RingFiles(root)
    index = files.json(layout.nodes_index)
    executions = scan_executions(files)
    ctx: dict = {
        "ring": ring,
        "root": str(root),
        "now": now,
        "final_view": ring.final_view,
        "index": index,
        "nodes": load_nodes(files, layout, index),
        "executions": executions,
        "by_key": {(e.node, e.view, e.variant): e for e in executions},
        "promotion": files.json(layout.promotion),
        "ranking": files.json(layout.ranking),
        "seated": files.json(layout.seated),
        "decision": _decision_with_story(files, layout),
        "final": files.json(layout.final_dir / "FINAL.json"),
        "repro": files.json(layout.repro) or files.json(layout.repro_record),
        "events": files.jsonl(layout.events),
    }
    ctx["clock"] = clock(ring, files.json(layout.cutoff), now)
    ctx["node_rows"] = node_rows(ctx)
    ctx["in_flight"] = [e for e in executions if e.in_flight]
    return ctx, files


def report_context(ring_dir: str | Path, now: float | None = None) -> dict:
    """Everything the report shows, read from the ring folder as it is right now."""
    ctx, files = base_context(ring_dir, now)
    layout = RingLayout(files.root)
    ctx["score_tables"] = score_tables(ctx)
    ctx["weights"] = weights_summary(ctx)
    ctx["health"] = health_summary(ctx)
    ctx["curve"] = curve(ctx)
    ctx["progress"] = ring_progress(ctx["ring"], layout)
    ctx["first_valid"] = ctx["progress"]["first_valid"]
    ctx["progress_curve"] = best_so_far_curve(ctx["progress"])
    ctx["gap"] = selection_gap(ctx)
    ctx["failures"] = failure_digest(files.root, (ctx["index"] or {}).get("nodes", []))
    ctx["final_section"] = decision_section(ctx, files, layout)
    ctx["headline"] = headline(ctx)
    ctx["lineage"] = lineage(ctx, files, layout)
    ctx["event_summary"] = event_summary(ctx)
    ctx["stage_times"] = stage_times(files.root)
    ctx["problems"] = files.problems
    return ctx


def _environment() -> Environment:
    # Autoescape on for every template: the names end in .j2, which select_autoescape's
    # extension test would not recognise.
    env = Environment(
        loader=PackageLoader("ringflow", "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        num=figure,
        duration=format_duration,
        when=format_time,
        nbytes=format_bytes,
        states=format_states,
    )
    return env


def render_report(ring_dir: str | Path, now: float | None = None) -> str:
    """The report's HTML for a ring folder (finished or in progress)."""
    ctx = report_context(ring_dir, now)
    return _environment().get_template("report.html.j2").render(**ctx)


def _decision_with_story(files, layout) -> dict | None:
    """The decision record, with what FINAL.json added after it (the other finalists'
    final-view scores and the selection gap): the decision record itself is never
    rewritten once made."""
    decision = files.json(layout.decision)
    final = files.json(layout.final_dir / "FINAL.json")
    if decision and final and final.get("decided_at") == decision.get("decided_at"):
        decision = {**decision, **{k: final[k] for k in ("finalists", "selection_gap")
                                   if k in final}}  # fmt: skip
    return decision


def write_report(ring_dir, out=None) -> Path:
    """Write the report (default RING_DIR/report.html) atomically; returns its path."""
    html = render_report(ring_dir)
    target = Path(out) if out else RingLayout(Path(ring_dir)).report
    atomic_write_text(target, html)
    return target
