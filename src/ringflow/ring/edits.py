"""A locked ring notices edits (docs/operations.md#chains): what it was given is fingerprinted at
import.

`sources.json` records, when the nodes are imported, the hash of every candidate and
baseline folder as given, the candidates folder's entries, the task's own files (task.yaml,
scorer, validator, helpers) and each view's inputs and labels. When the ring runs again, and
in `ringflow verify`, each is compared with what is there now: an edit under a locked ring
would otherwise be silently ignored (the ring runs its frozen copies) or silently used (the
scorer and labels are read live).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from ..core.clock import load_ring
from ..core.errors import InputError
from ..core.hashing import HashMemo, listing, listing_hash, solution_tree_hash
from ..core.jsonio import atomic_write_json, read_json
from ..core.layout import RingLayout
from ..core.node_state import Node, read_node
from ..core.state import Ring

SOURCES = "sources.json"


def task_files_hash(task_dir: Path) -> str:
    """Hash of the task folder outside views/: task.yaml, scorer, validator and helpers."""
    digest = hashlib.sha256()
    for path in sorted(task_dir.rglob("*")):
        rel = path.relative_to(task_dir)
        if rel.parts[0] == "views" or not path.is_file() or "__pycache__" in rel.parts:
            continue
        digest.update(rel.as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _source_hash(source: Path, per_view_paths: list[str]) -> str:
    if not source.is_dir():
        return "missing"
    try:
        return solution_tree_hash(source, set(per_view_paths))[0]
    except (InputError, OSError) as exc:
        return f"unhashable: {exc}"


def _part_hash(folder: Path, memo: HashMemo | None) -> str:
    if not folder.is_dir():
        return "missing"
    try:
        return listing_hash(listing(folder, memo=memo))
    except (InputError, OSError) as exc:
        return f"unhashable: {exc}"


def _candidate_entries(candidates_dir: Path) -> list[str]:
    if not candidates_dir.is_dir():
        return []
    return sorted(
        e.name for e in os.scandir(candidates_dir) if e.is_dir() and not e.name.startswith(".")
    )


def fingerprint(ring: Ring, nodes: list[Node]) -> dict:
    """What the ring was given, as it is now (`nodes`: every node.json, rejected included)."""
    memo = HashMemo(Path(ring.store) / "cache" / "hashmemo.json")
    task_dir = Path(ring.task.dir)
    views = {}
    for view in [*ring.search_views, ring.final_view]:
        view_dir = task_dir / "views" / view
        views[view] = {part: _part_hash(view_dir / part, memo) for part in ("inputs", "labels")}
    memo.save()
    return {
        "nodes": {
            node.id: {
                "path": node.origin["path"],
                "tree": _source_hash(
                    Path(node.origin["path"]), (node.solution or {}).get("per_view_paths", [])
                ),
            }
            for node in nodes
            if (node.origin or {}).get("kind") == "static"
        },
        "candidates": _candidate_entries(Path(ring.candidates_dir)),
        "task": {"dir": str(task_dir), "files": task_files_hash(task_dir)},
        "views": views,
    }


def record_sources(ring: Ring, nodes: list[Node]) -> None:
    layout = RingLayout(Path(ring.ring_dir))
    atomic_write_json(layout.root / SOURCES, fingerprint(ring, nodes))


def find_edits(ring_dir: str | Path) -> list[str]:
    """Each difference between what the ring was given and what is there now."""
    root = Path(ring_dir)
    if not (root / SOURCES).is_file() or not RingLayout(root).ring_json.is_file():
        return []
    ring = load_ring(root)
    then = read_json(root / SOURCES)
    nodes = [read_node(RingLayout(root).node_json(node_id)) for node_id in then["nodes"]]
    now = fingerprint(ring, nodes)
    edits = []
    for node_id, was in then["nodes"].items():
        tree = now["nodes"][node_id]["tree"]
        if tree != was["tree"]:
            how = "was removed" if tree == "missing" else "was edited"
            edits.append(f"{was['path']} ({node_id}) {how} after the ring was locked")
    for name in sorted(set(now["candidates"]) - set(then["candidates"])):
        edits.append(f"{Path(ring.candidates_dir) / name} was added after the ring was locked")
    if not Path(then["task"]["dir"]).is_dir():
        # One line for the whole task, not one per file and view.
        task = then["task"]["dir"]
        edits.append(f"{task}: the task folder was removed after the ring was locked")
        return edits
    if now["task"]["files"] != then["task"]["files"]:
        edits.append(
            f"{then['task']['dir']}: task.yaml, the scorer, the validator or a file beside "
            "them was edited after the ring was locked"
        )
    for view, parts in then["views"].items():
        for part, was in parts.items():
            if now["views"].get(view, {}).get(part) != was:
                edits.append(
                    f"{then['task']['dir']}/views/{view}/{part}/ changed after the ring was locked"
                )
    return edits


def refuse_edits(ring_dir: str | Path, ring_id: str) -> None:
    """At workflow start: a locked ring does not run on after what it was given changed."""
    from ..core.recovery import continuation_command, user_argv

    edits = find_edits(ring_dir)
    if edits:
        raise InputError(
            f"ring {ring_dir} is locked, and what it was given has changed since:\n  "
            + "\n  ".join(edits)
            + "\nThe ring would ignore edited candidates and use an edited task unnoticed. "
            "Undo the edits to resume this ring, or, to run them in a new ring that continues "
            "this one (its results taken, its weights replayed), run:\n    "
            + continuation_command(Path(ring_dir), None, user_argv())
        )
