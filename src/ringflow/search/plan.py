"""One generation of the search: decide whether the search goes on, and plan its new nodes.

A generation is planned once its predecessor's nodes are settled and scored (a Snakemake
checkpoint per generation, docs/contracts.md#engineer). It is the last one when no engineer is
configured, the hand-over point (cutoff - timeline.node_tail_min) has passed, or the ring holds
`search.max_nodes` nodes. Otherwise it plans up to `search.max_concurrent_nodes` new
nodes: a draft (from `engineer.template`) with probability `search.draft_fraction`, or
when nothing is scored yet; else an improvement of a parent drawn by the rank-weighted
lottery (lottery.py) among the scored candidates.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from ..carryover.engineer import operator
from ..core import statuses
from ..core.clock import handover_at, load_ring
from ..core.jsonio import atomic_write_json, read_json
from ..core.layout import RingLayout, node_slug
from ..core.ledger import Ledger
from ..core.node_state import Node, read_node, write_node
from ..core.state import Ring
from ..core.statuses import ENGINEERING
from ..core.stop import refuse_if_stopped
from ..selection.scores import node_mean
from .index import next_number, set_entry, update_index
from .lottery import draw_parents, generation_rng, ranked, tickets

DRAFT, IMPROVE = "draft", "improve"


def parent_scores(ring: Ring, layout: RingLayout, index: dict) -> dict[str, float]:
    """Seed-0 mean over the search views of every ready candidate that has one."""
    scores = {}
    for entry in index["nodes"]:
        if entry["role"] != "candidate" or entry["status"] != statuses.READY:
            continue
        mean = node_mean(ring, layout, entry["id"], "s0")["mean"]
        if mean is not None:
            scores[entry["id"]] = mean
    return scores


def own_nodes(index: dict) -> int:
    """Nodes that count against search.max_nodes: this ring's own (static, resumed,
    engineered) and imported ones that a candidate folder of this ring stands for; not the
    other nodes imported with their scores from the parent ring."""
    return sum(not e.get("imported") or bool(e.get("candidate")) for e in index["nodes"])


def _why_last(ring: Ring, index: dict, now: float) -> str | None:
    search = ring.config.search
    if operator(ring) is None:
        return "no engineer configured (engineer.command is null)"
    if now >= handover_at(ring):
        return "the hand-over point (cutoff - node_tail_min) has passed"
    if own_nodes(index) >= search.max_nodes:
        return f"the ring holds search.max_nodes = {search.max_nodes} nodes"
    return None


def plan_generation(ring_dir: str | Path, generation: int) -> dict:
    """Write search/gen-<g>.json (once; a resumed ring reads the plan it made)."""
    refuse_if_stopped(ring_dir)
    ring = load_ring(ring_dir)
    layout = RingLayout(Path(ring.ring_dir))
    path = layout.generation(generation)
    if path.exists():
        return read_json(path)
    now = time.time()
    index = read_json(layout.nodes_index)
    planned = _planned_before_a_crash(layout, index, generation)
    plan = {"generation": generation, "planned_at": now, "handover_at": handover_at(ring),
            "last": False, "reason": None, "nodes": [], "lottery": []}  # fmt: skip
    if planned:
        # Planned by an attempt that died before writing its plan: the same nodes, once. In
        # generation 0 of a ring that continues a chain, these are its resume nodes of the
        # engineer kind, created at import: they are served before any new node.
        plan["nodes"] = planned
        plan["resumed"] = [n for n in planned if n in _resume_nodes(layout, index)]
        atomic_write_json(path, plan)
        return plan
    why = _why_last(ring, index, now)
    if why is not None:
        plan.update(last=True, reason=why)
        atomic_write_json(path, plan)
        return plan
    search = ring.config.search
    slots = min(search.max_concurrent_nodes, search.max_nodes - own_nodes(index))
    scores = parent_scores(ring, layout, index)
    order = ranked(scores, ring.task.direction)
    plan["lottery"] = [
        {"node": node, "score": scores[node], "tickets": t}
        for node, t in zip(order, tickets(len(order)), strict=True)
    ]
    rng = generation_rng(ring.ring_id, generation)
    kinds = [DRAFT if not scores or rng.random() < search.draft_fraction else IMPROVE
             for _ in range(slots)]  # fmt: skip
    parents = iter(draw_parents(scores, ring.task.direction, kinds.count(IMPROVE), rng))
    names = {n["id"]: n["name"] for n in index["nodes"]}
    stubs = []
    number = next_number(index)
    for kind in kinds:
        parent = next(parents) if kind == IMPROVE else None
        # The lineage's root name and this generation: mlp-g3, not mlp-g0-g1-g3.
        base = re.sub(r"(-g\d+)+$", "", names[parent]) if parent else "draft"
        name = f"{base}-g{generation}"
        node_id = f"n{number:03d}-{node_slug(name)}"
        number += 1
        stubs.append(_stub(ring, node_id, name, kind, parent, generation, now))
    for stub in stubs:
        write_node(layout.root, layout.node_json(stub["id"]), Node.from_record(stub))

    def add(index: dict) -> None:
        for stub in stubs:
            set_entry(index, _entry(stub))

    update_index(layout, add)
    ledger = Ledger(layout.ledger)
    for stub in stubs:
        ledger.append("node_planned", node=stub["id"], origin=stub["origin"]["kind"],
                      parent=stub["parent"], generation=generation)  # fmt: skip
    plan["nodes"] = [stub["id"] for stub in stubs]
    atomic_write_json(path, plan)
    return plan


def _planned_before_a_crash(layout: RingLayout, index: dict, generation: int) -> list[str]:
    """Nodes of this generation already in the index (their plan file was never written)."""
    planned = []
    for entry in index["nodes"]:
        if entry["status"] != ENGINEERING:
            continue
        node = read_node(layout.node_json(entry["id"]))
        if node.origin.get("generation") == generation:
            planned.append(entry["id"])
    return planned


def _resume_nodes(layout: RingLayout, index: dict) -> set[str]:
    return {entry["id"] for entry in index["nodes"]
            if read_node(layout.node_json(entry["id"])).origin["kind"] == "resume"}  # fmt: skip


def _stub(ring, node_id, name, kind, parent, generation, now) -> dict:
    return {
        "id": node_id,
        "name": name,
        "role": "candidate",
        "status": ENGINEERING,
        "origin": {"kind": kind, "generation": generation},
        "parent": parent,
        "operator": operator(ring),
        "created_at": now,
        "timestamps": {"planned_at": now},
        "queries_used": None,
    }


def _entry(node: dict) -> dict:
    return {"id": node["id"], "name": node["name"], "role": node["role"],
            "status": node["status"]}  # fmt: skip


def write_loop_summary(ring_dir: str | Path) -> dict:
    """search/loop.json: every generation, and each engineered node's origin and status."""
    ring = load_ring(ring_dir)
    layout = RingLayout(Path(ring.ring_dir))
    generations = []
    g = 0
    while layout.generation(g).exists():
        plan = read_json(layout.generation(g))
        nodes = []
        for node_id in plan["nodes"]:
            node = read_node(layout.node_json(node_id))
            nodes.append({"id": node_id, "origin": node.origin["kind"],
                          "parent": node.parent, "status": node.status})  # fmt: skip
        generations.append({"generation": g, "planned_at": plan["planned_at"], "nodes": nodes,
                            "last": plan["last"], "reason": plan["reason"]})  # fmt: skip
        g += 1
    summary = {"generations": generations, "written_at": time.time()}
    atomic_write_json(layout.search_loop, summary)
    return summary


def settle_generation(ring_dir: str | Path, generation: int) -> dict:
    """search/settled-<g>.json: each node of generation g and how it was settled."""
    ring = load_ring(ring_dir)
    layout = RingLayout(Path(ring.ring_dir))
    plan = read_json(layout.generation(generation))
    settled = {"generation": generation, "nodes": {}}
    for node_id in plan["nodes"]:
        status = read_json(layout.session(node_id))["node_status"]
        settled["nodes"][node_id] = status
    atomic_write_json(layout.settled(generation), settled)
    return settled
