"""Plain-text views of a ring: the end-of-search record and the one-screen summary."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from ..carryover.scored import summary_lines as scored_summary
from ..jsonio import atomic_write_json, read_json
from ..ring.clock import load_ring
from ..ring.layout import RingLayout
from ..search.best_so_far import ring_progress
from ..selection.promote import node_mean
from .digest import digest_lines, failure_digest


def write_search_summary(ring_dir) -> dict:
    ring = load_ring(ring_dir)
    layout = RingLayout(Path(ring["ring_dir"]))
    index = read_json(layout.nodes_index)
    rows = {
        n["id"]: node_mean(ring, layout, n["id"], "s0")
        for n in index["nodes"]
        if n["status"] == "ready"
    }
    record = {"ended_at": time.time(), "seed0": rows}
    atomic_write_json(layout.search, record)
    return record


def executions(layout: RingLayout):
    """Every result.json of the ring, as (node, view, variant, result)."""
    for path in sorted(layout.root.glob("nodes/*/exec/*/*/result.json")):
        variant_dir = path.parent
        yield (
            variant_dir.parent.parent.parent.name,
            variant_dir.parent.name,
            variant_dir.name,
            read_json(path),
        )


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.4f}"


def _valid(layout: RingLayout, node: str, view: str, variant: str) -> bool:
    """A run counts as scored when the scorer gave it a valid score."""
    path = layout.score(node, view, variant)
    if not path.exists():
        return False
    score = read_json(path)
    return bool(score.get("scored") and score.get("valid"))


def _after(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def progress_lines(progress: dict) -> list[str]:
    """Best so far and time to the first valid result on the proxy view (seed-0 runs and
    background evaluations, the same in blind and native rings)."""
    best, first = progress["best"], progress["first_valid"]
    if best is None:
        return [f"best so far on {progress['view']}: no valid result"]
    evaluations = sum(b["evaluations"] for b in progress["background"].values())
    scored = sum(b["scored"] for b in progress["background"].values())
    how = "background evaluation" if first["source"] == "background" else "seed 0"
    return [
        f"best so far on {progress['view']}: {best['score']:.4f} ({best['node']}, after "
        f"{_after(best['t'])}); first valid result after {_after(first['t'])} "
        f"({first['node']}, {how})",
        f"background evaluations: {evaluations} ({scored} scored)",
    ]


def origin_label(layout: RingLayout, entry: dict) -> str:
    """Where a node comes from: baseline, static (a candidate folder), draft/improve (an
    engineer session, with its generation), resume (carried-over work) or imported."""
    if entry.get("role") == "baseline":
        return "baseline"
    path = layout.node_json(entry["id"])
    origin = (read_json(path).get("origin") or {}) if path.exists() else {}
    kind = origin.get("kind") or "static"
    if kind in ("draft", "improve") and origin.get("generation") is not None:
        return f"{kind} g{origin['generation']}"
    return kind


def carryover_lines(layout: RingLayout, nodes: list[dict]) -> list[str]:
    """What crossed the ring boundary: work this ring sealed for the next one, and sealed
    work it imported and resumed (SPEC 11)."""
    lines = []
    imported_path = layout.carryover_imported
    if imported_path.exists():
        imported = read_json(imported_path)
        resumed = []
        for entry in nodes:
            path = layout.node_json(entry["id"])
            origin = (read_json(path).get("origin") or {}) if path.exists() else {}
            if origin.get("kind") == "resume":
                resumed.append(f"{entry['id']} ({origin.get('carry_kind')}, "
                               f"{origin.get('identity')}): {entry['status']}")  # fmt: skip
        rejected = imported.get("rejected") or []
        refused = imported.get("refused") or []
        if imported.get("imported") or rejected or resumed or refused:
            lines.append(f"carried in: {len(imported.get('imported') or [])} sealed piece(s) of "
                         f"work verified, {len(rejected)} rejected")  # fmt: skip
            lines += [f"  resumed {line}" for line in resumed]
            lines += [f"  rejected {r.get('identity')}: {r.get('reason')}" for r in rejected]
            lines += [f"  not resumed {r.get('identity')}: {r.get('reason')}" for r in refused]
        lines += scored_summary(layout.root, imported)  # scored work, comparability (SPEC 12)
    if layout.carryover_seals.exists():
        seals = read_json(layout.carryover_seals)
        carried = "piece(s) of work sealed for the next ring"
        lines += _seal_block(seals.get("seals"), seals.get("refused"), carried, "carried out")
        lines += _seal_block(seals.get("evidence"), seals.get("evidence_refused"),
                             "session(s) cut at the hand-over with a runnable program, sealed "
                             "(never carried)", "evidence")  # fmt: skip
    return ["", *lines] if lines else []


def _seal_block(sealed: list | None, refused: list | None, what: str, title: str) -> list[str]:
    """A heading with the count, one line per seal (its kind where it has one), one per
    node that was not sealed and why."""
    if not sealed and not refused:
        return []
    lines = [f"{title}: {len(sealed or [])} {what}"]
    for seal in sealed or []:
        kind = f" ({seal['kind']})" if seal.get("kind") and title != "evidence" else ""
        lines.append(f"  {seal['node']}{kind} -> {seal['snapshot']}")
    lines += [f"  not sealed {item.get('node')}: {item.get('reason')}" for item in refused or []]
    return lines


def render_summary(ring_dir) -> str:
    ring = load_ring(ring_dir)
    layout = RingLayout(Path(ring["ring_dir"]))
    index = read_json(layout.nodes_index) if layout.nodes_index.exists() else {"nodes": []}
    ranking = read_json(layout.ranking) if layout.ranking.exists() else {"ranked": []}
    three_seed = {row["node"]: row["score"] for row in ranking["ranked"]}
    lines = [
        f"ring {ring['ring_id']}  task {ring['task']['name']} ({ring['task']['direction']})",
        f"  folder   {layout.root}",
        f"  final    {layout.final_dir}" + ("" if layout.final_dir.exists() else " (not written)"),
        f"  report   {layout.report}",
        "",
        f"{'node':<22} {'origin':<10} {'status':<12} {'runs ok':>8} {'scored':>8} "
        f"{'seed-0':>8} {'3-seed':>8}",
    ]
    runs = list(executions(layout))
    for node in index["nodes"]:
        ready = node["status"] == "ready"
        s0 = node_mean(ring, layout, node["id"], "s0")["mean"] if ready else None
        mine = [(n, v, var, r) for n, v, var, r in runs if n == node["id"]]
        ok = f"{sum(r['status'] == 'ok' for *_, r in mine)}/{len(mine)}"
        scored = f"{sum(_valid(layout, n, v, var) for n, v, var, _ in mine)}/{len(mine)}"
        lines.append(
            f"{node['id']:<22} {origin_label(layout, node):<10} {node['status']:<12} "
            f"{ok:>8} {scored:>8} {_fmt(s0):>8} {_fmt(three_seed.get(node['id'])):>8}"
        )
    modes = Counter(r["weights_mode"] for *_, r in runs)
    statuses = Counter(r["status"] for *_, r in runs)
    lines += [
        "",
        "executions: " + ", ".join(f"{k} {v}" for k, v in sorted(statuses.items())),
        "weights:    " + ", ".join(f"{k} {v}" for k, v in sorted(modes.items())),
        *progress_lines(ring_progress(ring, layout)),
        *carryover_lines(layout, index["nodes"]),
        "",
        *digest_lines(failure_digest(layout.root, index["nodes"])),
    ]
    if layout.decision.exists():
        decision = read_json(layout.decision)
        lines += [
            "",
            f"final decision: {decision['decision']}"
            + (f" -> {decision.get('chosen')}" if decision.get("chosen") else ""),
            f"  {decision.get('reason', '')}",
        ]
        guard = decision.get("guard")
        if guard and guard.get("lcb") is not None:
            lines.append(
                f"  guard: LCB {guard['lcb']:.4f} at alpha {guard['alpha']:.4g}, "
                f"margin {guard['margin']}, seeds {guard['seeds']}"
            )
        lines += decision_detail_lines(decision)
    return "\n".join(lines) + "\n"


def decision_detail_lines(decision: dict) -> list[str]:
    """What the guard judged, every finalist passed over and why, and the warnings."""
    lines = []
    judged = decision.get("guard_judged")
    if judged:
        covered = [k.replace("_", " ") for k in ("program_noise", "rows", "training_luck")
                   if judged.get(k)]  # fmt: skip
        lines.append(f"  the guard judged: {', '.join(covered)}")
    detectable = ((decision.get("guard") or {}).get("bootstrap") or {}).get("detectable")
    if detectable is not None:
        lines.append(f"  smallest advantage this guard could detect: {detectable:.4g}")
    for item in decision.get("passed_over") or []:
        lines.append(f"  passed over: {item['node']} (rank {item['rank']}, "
                     f"{item['outcome'].replace('_', ' ')}): {item['reason']}")  # fmt: skip
    for warning in decision.get("warnings") or []:
        lines.append(f"  warning: {warning}")
    return lines
