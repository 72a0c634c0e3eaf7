"""Nodes of a ring: static candidates imported once, with their weights keys fixed
(docs/contracts.md#weights)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from .candidate import Solution, copy_submission, load_solution, task_file_ids
from .carryover import engineer
from .carryover.resume import resume_entries, resume_fields
from .carryover.scored import (
    imported_fields,
    scored_entries,
    settle_imported,
    submission_problem,
)
from .core.durability import group_commit
from .core.errors import CandidateError
from .core.hashing import solution_tree_hash
from .core.jsonio import atomic_write_json, read_json
from .core.layout import RingLayout, is_guard_variant, is_review_variant, node_slug, variant_seed
from .core.ledger import Ledger, emit_event
from .core.node_state import Node, write_node
from .core.safetree import remove_tree
from .core.seeds import PROBE_SEEDS
from .core.state import Ring
from .core.statuses import READY, REJECTED
from .ring.edits import record_sources
from .weights import keys
from .weights.store import WeightsStore
from .workcopy import make_readonly_tree


def review_extra_variants(ring: Ring) -> list[str]:
    """The view-blind check's further runs, made only when its first screen flags."""
    settings = ring.config.view_blind
    extra = 8 if settings is None or settings.extra_runs is None else settings.extra_runs
    return ["real-s0", *(f"blind{n}-s0" for n in range(3, 3 + extra))]


def planned_variants(ring: Ring) -> dict[str, list[str]]:
    """Every execution a node may get, per view (run on demand; docs/contracts.md#seeds). Guard
    seeds run on the guard views only; on the search views when the task has none."""
    guard = [f"g{s}" for s in ring.guard_seeds]
    guard_views = ring.guard_views or []
    search = ["s0", "s0-ablate", "s1", "s2", *([] if guard_views else guard)]
    search += ["fresh-s0", "blind-s0", "blind2-s0", *review_extra_variants(ring)]
    plan = {view: list(search) for view in ring.search_views}
    plan.update({view: list(guard) for view in guard_views})
    # The baseline's probe runs: the guard's power before any guard seed is spent.
    for view in guard_views or ring.search_views:
        plan[view] += [f"g{seed}" for seed in PROBE_SEEDS]
    plan[ring.final_view] = ["s0"]
    return plan


# With guard.retrain, guard seed g trains its own weights with training seed
# GUARD_TRAIN_SEED_BASE + g (in the key), so the guard's bound covers training luck.
GUARD_TRAIN_SEED_BASE = 10_000


def guard_train_seed(ring: Ring, solution: Solution, variant: str) -> int | None:
    """The training seed of a guard run that retrains (guard.retrain), else None."""
    if not is_guard_variant(variant) or not ring.config.guard.retrain:
        return None
    seed = variant_seed(variant)
    return seed if solution.seed_affects_training else GUARD_TRAIN_SEED_BASE + seed


def execution_spec(ring: Ring, solution: Solution, tree: str, view: str, variant: str) -> dict:
    seed = variant_seed(variant)
    ablate = variant == "s0-ablate"
    retrain_seed = guard_train_seed(ring, solution, variant)
    train_seed = solution.training_seed(seed) if retrain_seed is None else retrain_seed
    spec = {"seed": seed, "ablate": ablate, "weights": "none", "key": None,
            "train_seed": train_seed}  # fmt: skip
    if not solution.has_weights:
        return spec
    if variant == "fresh-s0" or is_review_variant(variant):
        spec["weights"] = "fresh"
        return spec
    key, components = keys.weights_key(
        tree_hash=tree,
        train_seed=train_seed,
        view_hash=ring.views[view].inputs_hash,
        env_key=ring.views[view].env_key or ring.env_key,
        train_args=["--ablate"] if ablate else [],
        interpreter=keys.command_interpreter(
            list(solution.command), ring.environment["variables"].get("PATH")
        ),
    )
    spec.update(weights="store", key=key, key_components=components)
    return spec


def _make_node(
    ring, layout, store, node_id, role, source: Path, max_bytes, task_files=None
) -> dict:
    node = {
        "id": node_id,
        "name": source.name,
        "role": role,
        "origin": {"kind": "static", "path": str(source)},
        "parent": None,
        "operator": None,
        "queries_used": 0,
        "created_at": time.time(),
    }
    try:
        solution = load_solution(source, max_bytes, task_files=task_files)
    except CandidateError as exc:
        node.update(status=REJECTED, error=str(exc))
        return node
    submission = layout.submission(node_id)
    # An import cut short left this copy read-only: it is made again whole.
    remove_tree(submission)
    copy_submission(solution, submission)
    # Working copies hardlink these files: read-only, so none of them can change it.
    make_readonly_tree(submission)
    tree, _ = solution_tree_hash(submission, set(solution.per_view_paths), ring.tree_ignore or [])
    executions = {
        view: {v: execution_spec(ring, solution, tree, view, v) for v in variants}
        for view, variants in planned_variants(ring).items()
    }
    node.update(
        status=READY,
        tree_hash=tree,
        solution=solution.to_dict(),
        executions=executions,
    )
    return node


def _assign_trainers(nodes: list[dict], store: WeightsStore) -> dict:
    """Per key: the one execution that trains it, or the store when an earlier ring did."""
    trainers: dict[str, dict] = {}
    for node in nodes:
        for view, variants in node.get("executions", {}).items():
            for variant, spec in variants.items():
                key = spec.get("key")
                if key is None or key in trainers:
                    continue
                if store.find(key) is not None:
                    trainers[key] = {"trainer": None, "in_store": True}
                else:
                    trainers[key] = {"trainer": [node["id"], view, variant], "in_store": False}
    return trainers


def _with_resumed(ring: Ring, sources: list):
    """The sources, with the resume queue's work where ("resume", None) stands, followed by
    the scored work imported from the parent ring (docs/operations.md#chains)."""
    for role, source in sources:
        if role != "resume":
            yield role, source
            continue
        for entry in resume_entries(ring):
            yield "candidate", resume_fields(ring, entry)
        for entry in scored_entries(ring):
            yield "candidate", {**imported_fields(ring, entry), "entry": entry}


def _index_entry(node: dict) -> dict:
    entry = {k: node[k] for k in ("id", "name", "role", "status")}
    if "imported" in node:  # made from the parent's scored work; rescored or not
        entry.update(imported=True, rescore=bool(node["imported"]["rescore"]),
                     candidate=bool(node["imported"].get("candidate")))  # fmt: skip
    return entry


def import_static(ring: Ring) -> dict:
    """Create the ring's nodes from the baseline and the candidates folder (once)."""
    layout = RingLayout(Path(ring.ring_dir))
    if layout.nodes_index.exists():
        index = read_json(layout.nodes_index)
        if not layout.nodes_static.exists():  # cut between the two writes below
            atomic_write_json(layout.nodes_static, index)
        return read_json(layout.nodes_static)
    store = WeightsStore(ring.store)
    max_bytes = int(ring.config.max_weights_gb * 1024**3)
    sources: list[tuple[str, Path]] = []
    if ring.baseline_dir:
        sources.append(("baseline", Path(ring.baseline_dir)))
    candidates_dir = Path(ring.candidates_dir)
    for entry in sorted(os.scandir(candidates_dir), key=lambda e: e.name):
        if entry.is_dir() and not entry.name.startswith("."):
            sources.append(("candidate", Path(entry.path)))
    ledger = Ledger(layout.ledger)
    if sources and sources[0][0] == "baseline":
        sources.insert(1, ("resume", None))
    else:
        sources.insert(0, ("resume", None))
    # Every node's record and ledger lines are synced together once all are written,
    # before the index that marks the import done (docs/ring-folder.md#durability).
    with group_commit():
        nodes = _import_nodes(ring, layout, store, ledger, sources, max_bytes,
                              task_file_ids(ring.task.dir))  # fmt: skip
    index = {
        "nodes": [_index_entry(n) for n in nodes],
        "baseline": next((n["id"] for n in nodes if n["role"] == "baseline"), None),
        "keys": _assign_trainers(nodes, store),
    }
    record_sources(ring, [Node.from_record(node) for node in nodes])
    atomic_write_json(layout.nodes_index, index)
    # The import checkpoint's output, never rewritten: the search adds engineered nodes
    # to the living index, and the workflow reads the imported nodes from this one.
    atomic_write_json(layout.nodes_static, index)
    return index


def _import_nodes(ring: Ring, layout: RingLayout, store: WeightsStore, ledger: Ledger,
                  sources: list, max_bytes: int, task_files: dict) -> list[dict]:  # fmt: skip
    nodes: list[dict] = []
    number = 0 if ring.baseline_dir else 1
    resumed_trees: dict[str, str] = {}
    imported_trees: dict[str, str] = {}
    sender_ids: dict[tuple[str, str], str] = {}
    for role, source in _with_resumed(ring, sources):
        # Carried work resumed in this ring (docs/operations.md#carryover).
        resumed = isinstance(source, dict)
        name = source["name"] if resumed else source.name
        node_id = f"n{number:03d}-{node_slug(name)}"
        folder = Path(source["origin"]["path"]) if resumed else source
        entry = source.pop("entry", None) if resumed else None
        problem = None if entry is None else submission_problem(entry, max_bytes)
        if problem is not None:
            node = {"id": node_id, "role": role, "status": REJECTED, "error": problem,
                    "created_at": time.time()}  # fmt: skip
        elif resumed and source["origin"].get("carry_kind") == engineer.KIND:
            # Cut engineer work: a new session resumes it in generation 0.
            node = engineer.resume_stub(ring, node_id, source)
        else:
            node = _make_node(ring, layout, store, node_id, role, folder, max_bytes, task_files)
        if entry is not None and node.get("tree_hash") in resumed_trees:
            # Work the resume queue took already (it is that node).
            shutil.rmtree(layout.node_dir(node_id), ignore_errors=True)
            continue
        if resumed:
            node.update(source)
            if entry is not None:
                settle_imported(node, sender_ids)
                if node["status"] != REJECTED:
                    imported_trees[node["tree_hash"]] = node_id
            elif node.get("tree_hash"):
                resumed_trees[node["tree_hash"]] = node_id
        elif node.get("tree_hash") in resumed_trees:
            # The same submission as resumed work: this candidate continues as that node.
            shutil.rmtree(layout.node_dir(node_id))
            emit_event(layout.root, "candidate_resumed", candidate=str(source),
                       node=resumed_trees[node["tree_hash"]])  # fmt: skip
            continue
        elif node.get("tree_hash") in imported_trees:
            # The same submission as a scored node of the parent: this candidate is that
            # node, with its scores (comparable or not) and not executed a second time.
            shutil.rmtree(layout.node_dir(node_id))
            twin = next(n for n in nodes if n["id"] == imported_trees[node["tree_hash"]])
            twin["imported"]["candidate"] = str(source)  # a static candidate of this ring
            write_node(layout.root, layout.node_json(twin["id"]), Node.from_record(twin))
            emit_event(layout.root, "candidate_imported", candidate=str(source),
                       node=twin["id"])  # fmt: skip
            continue
        number += 1
        write_node(layout.root, layout.node_json(node_id), Node.from_record(node))
        nodes.append(node)
        if node["status"] == REJECTED:
            emit_event(layout.root, "candidate_rejected", node=node_id, error=node["error"])
        ledger.append(
            "node_created",
            node=node_id,
            role=role,
            status=node["status"],
            tree_hash=node.get("tree_hash"),
        )
    return nodes
