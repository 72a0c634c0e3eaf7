"""`ringflow report --chain RING_DIR`: one page for every ring of the chain that ends at
RING_DIR (docs/report.md#the-chain-page).

The chain is followed through `continue_from`, from RING_DIR back to the first ring, and
shown first to last: best so far across the rings against wall time since the first one
started, what crossed each boundary (sealed and carried out, verified and resumed,
rejected or not resumed), and each ring's decision and `final/`.
"""

from __future__ import annotations

import time
from pathlib import Path

from ..core.clock import load_ring
from ..core.errors import InputError
from ..core.jsonio import atomic_write_text
from ..core.layout import RingLayout
from ..core.seeds import chain_rings
from ..core.state import LockedTask, Ring
from ..search.best_so_far import ring_progress
from ..selection.incumbent import history as incumbent_history
from .charts import Chart
from .headline import deployable, improvement
from .report import RingFiles, _environment, format_duration, score_label

CHAIN_PAGE = "chain.html"


def _better(direction: str, a: float, b: float) -> bool:
    return a > b if direction == "maximize" else a < b


def _origin_counts(files: RingFiles, root: Path) -> dict:
    """This ring's nodes that came from earlier rings: resumed work and imported scores."""
    resumed, imported = [], []
    for path in RingLayout(root).node_files("node.json"):
        node = files.node(path)
        origin = (node.origin if node is not None else None) or {}
        if origin.get("kind") == "resume":
            status = node.status if node.status is not None else "?"
            resumed.append({"id": node.id, "identity": origin.get("identity"),
                            "kind": origin.get("carry_kind"), "status": status})  # fmt: skip
        elif origin.get("kind") == "imported":
            imported.append(node.id)
    return {"resumed": resumed, "imported_scored": imported}


def boundary(files: RingFiles, previous: Ring | None, ring: Ring) -> dict | None:
    """What crossed into `ring` from the ring before it: sealed there, then verified,
    resumed, rejected or not resumed here."""
    if previous is None:
        return None
    root = Path(ring.ring_dir)
    sealed = files.json(Path(previous.ring_dir) / "carryover" / "seals.json") or {}
    imported = files.json(root / "carryover" / "imported.json") or {}
    return {
        "from": previous.ring_id,
        "to": ring.ring_id,
        "sealed": sealed.get("seals") or [],
        "not_sealed": sealed.get("refused") or [],
        "verified": imported.get("imported") or [],
        "rejected": imported.get("rejected") or [],
        "refused": imported.get("refused") or [],
        "waiting": imported.get("waiting") or [],
        "already_resumed": imported.get("already_resumed") or [],
        **_origin_counts(files, root),
    }


def ring_entry(files: RingFiles, ring: Ring, offset: float) -> dict:
    """One ring of the chain: its clock, best so far, decision and final/."""
    root = Path(ring.ring_dir)
    layout = RingLayout(root)
    decision = files.json(layout.decision) or files.json(layout.final_dir / "FINAL.json")
    progress = ring_progress(ring, layout)
    # Over once the decision is made and reproduced: the workflow writes the chain page at
    # the report step, before the ring's last record (stop_manifest.json).
    over = files.json(layout.decision) is not None and layout.repro_record.is_file()
    finished = over or files.json(layout.stop_manifest) is not None
    return {
        "ring_id": ring.ring_id,
        "root": str(root),
        "start": ring.start,
        "offset": offset,
        "proxy_hash": (
            view.content_hash if (view := (ring.views or {}).get(progress["view"])) else None
        ),
        "progress": progress,
        "decision": decision,
        "improvement": None if decision is None else improvement(decision),
        "deploy": deployable(root, decision),
        "finished": finished,
        "report": str(layout.report) if layout.report.exists() else None,
        "search_hash": ring.search_hash,
    }


def chain_chart(rings: list[dict], direction: str, task: LockedTask) -> dict:
    """Every ring's valid results on its proxy view against time since the first ring
    started; each ring's own best-so-far line, and the boundaries between rings."""
    points, lines = [], []
    for i, r in enumerate(rings):
        own = [{**p, "t": p["t"] + r["offset"], "ring": r["ring_id"], "vclass": f"v{i % 6}"}
               for p in r["progress"]["points"]]  # fmt: skip
        points += own
        steps = [{**s, "t": s["t"] + r["offset"]} for s in r["progress"]["steps"]]
        lines.append({"ring": r["ring_id"], "steps": steps, "vclass": f"v{i % 6}",
                      "until": max((p["t"] for p in own), default=r["offset"])})  # fmt: skip
    data = {"points": [], "lines": [], "markers": [], "empty": not points}
    if not points:
        return data
    end = max(p["t"] for p in points)
    ylabel = score_label(task.direction, f"score on {rings[-1]['progress']['view']}")
    xlabel = "wall time since the chain's first ring started"
    chart = Chart(620, 280, end, [p["score"] for p in points], xlabel=xlabel, ylabel=ylabel)
    data.update(chart.frame())
    data["points"] = [{**p, "x": chart.x(p["t"]), "y": chart.y(p["score"])} for p in points]
    data["lines"] = [{**ln, "path": chart.step_path(ln["steps"], until=ln["until"])}
                     for ln in lines if ln["steps"]]  # fmt: skip
    data["markers"] = [chart.marker(r["offset"], f"{r['ring_id']} starts", "boundary")
                       for r in rings[1:]]  # fmt: skip
    return data


def chain_best(rings: list[dict], direction: str) -> dict | None:
    """The best valid result of the chain, over the rings whose proxy view has the same
    content as the last ring's (scores on other data are not compared)."""
    last = rings[-1]["proxy_hash"]
    best = None
    for r in rings:
        if r["proxy_hash"] != last:
            continue
        candidate = r["progress"]["best"]
        if candidate is not None and (
            best is None or _better(direction, candidate["score"], best["score"])
        ):
            best = {**candidate, "ring": r["ring_id"], "t_chain": candidate["t"] + r["offset"]}
    return best


def chain_context(ring_dir: str | Path, now: float | None = None) -> dict:
    root = Path(ring_dir).resolve()
    if not RingLayout(root).ring_json.is_file():
        raise InputError(f"{root}: not a ring folder (RING.json not found)")
    locks = list(reversed(chain_rings(root)))  # first ring first
    files = RingFiles(root)
    first_start = locks[0].start or 0.0
    rings, boundaries = [], []
    for i, lock in enumerate(locks):
        rings.append(ring_entry(files, lock, (lock.start or first_start) - first_start))
        boundaries.append(boundary(files, locks[i - 1] if i else None, lock))
    task = locks[-1].task
    return {
        "task": task,
        "rings": rings,
        "boundaries": boundaries,
        "chart": chain_chart(rings, task.direction, task),
        "history": incumbent_history(root),
        "best": chain_best(rings, task.direction),
        "root": str(root),
        "now": time.time() if now is None else now,
        "problems": files.problems,
    }


def render_chain(ring_dir: str | Path, now: float | None = None) -> str:
    ctx = chain_context(ring_dir, now)
    return _environment().get_template("chain.html.j2").render(**ctx, duration=format_duration)


def write_chain(ring_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write the chain page (default RING_DIR/chain.html) atomically; returns its path."""
    html = render_chain(ring_dir)
    target = Path(out) if out else Path(ring_dir) / CHAIN_PAGE
    atomic_write_text(target, html)
    return target


def continues_another(ring_dir: str | Path) -> bool:
    """Whether the ring continues another (`continue_from` in its RING.json)."""
    return load_ring(ring_dir).continue_from is not None


def write_chain_of_continuation(ring_dir: str | Path) -> Path | None:
    """The report step's chain page: RING_DIR/chain.html for a ring that continues another,
    nothing for a first ring (docs/report.md#the-chain-page)."""
    return write_chain(ring_dir) if continues_another(ring_dir) else None
