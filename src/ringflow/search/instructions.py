"""The instructions an engineer session reads (rendered from a Jinja2 template).

Native and blind renderings differ only in the feedback section: every score a session
may see (its parent's, the refuted directions', the query quota) is in that section and
nowhere else (docs/contracts.md#engineer)."""

from __future__ import annotations

from pathlib import Path

import jinja2

from ..carryover import engineer as carried
from ..carryover.scores import imported_refuted
from ..core import statuses
from ..core.jsonio import read_json
from ..core.layout import RingLayout
from ..core.node_state import Node, read_node
from ..core.state import Ring
from ..selection.scores import node_mean
from . import public_validator

TEMPLATE = "engineer.md.j2"
METHOD_CHARS = 2000


def _environment() -> jinja2.Environment:
    folder = Path(__file__).resolve().parents[1] / "templates"
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(folder),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def method_of(layout: RingLayout, node: str) -> str:
    path = layout.submission(node) / "METHOD.md"
    if not path.is_file():
        return "(no METHOD.md)"
    return path.read_text(errors="replace").strip()[:METHOD_CHARS]


def refuted_directions(ring: Ring, layout: RingLayout, index: dict) -> list[dict]:
    """Ready nodes whose seed-0 mean is worse than their parent's, with both scores."""
    sign = 1.0 if ring.task.direction == "maximize" else -1.0
    refuted = []
    for entry in index["nodes"]:
        if entry["status"] != statuses.READY:
            continue
        parent = read_node(layout.node_json(entry["id"])).parent
        if not parent:
            continue
        mine = node_mean(ring, layout, entry["id"], "s0")["mean"]
        theirs = node_mean(ring, layout, parent, "s0")["mean"]
        if mine is not None and theirs is not None and sign * (mine - theirs) < 0:
            method = method_of(layout, entry["id"])
            refuted.append({"node": entry["id"], "parent": parent, "score": mine,
                            "parent_score": theirs, "method": method})  # fmt: skip
    # Those the chain found before this ring, scored where they were (docs/operations.md#chains).
    listed = {item["node"] for item in refuted}
    return refuted + [r for r in imported_refuted(layout, index) if r["node"] not in listed]


def context(ring: Ring, layout: RingLayout, node: Node, deadline: float) -> dict:
    """Everything the template needs; scores are only read by its feedback section. A
    resume node's parent lies in the ring where its work began (carryover/engineer.py)."""
    index = read_json(layout.nodes_index)
    parent = node.parent
    search = ring.config.search
    parents = carried.parent_layout(layout, node)
    if not parents.node_json(parent or "-").is_file():
        parent_scores = None
    else:
        parent_scores = node_mean(ring, parents, parent, "s0")
    return {
        "node": node.id,
        "origin": node.origin["kind"],
        "task": ring.task.name,
        "direction": ring.task.direction,
        "search_views": ring.search_views,
        "deadline": deadline,
        "parent": parent,
        "parent_method": method_of(parents, parent) if parent else None,
        "parent_scores": parent_scores,
        "parent_dir": carried.parent_submission(layout, node) is not None,
        "resume": carried.resume_context(layout, node),
        "refuted": refuted_directions(ring, layout, index),
        "feedback": search.feedback,
        "queries_left": carried.queries_left(ring, node),
        "queries_per_node": search.queries_per_node,
        "queries_earlier": carried.earlier_queries(node) if carried.is_resume(node) else 0,
        "validator": bool(ring.task.validator),
        "validator_withheld": public_validator.refusal(ring.task),
    }


def render(values: dict) -> str:
    return _environment().get_template(TEMPLATE).render(**values)
