"""A deployable solution (docs/contracts.md#deploying-the-result): the chosen program's code with
its trained weights.

`final/solution/` (and `ringflow export RING DEST`) holds the submission, the weights
trained on the `final` view at their declared paths (so the program loads them and runs
on new data without retraining), the weights of each search view under
`weights/<view>/<declared path>`, and `MANIFEST.json`: file hashes, each weights key
with its components, the environment, and how to run it. Weights are copied out of the
store and checked against their registered sha256; nothing here links into the store.
"""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
import time
from pathlib import Path

from ..core.clock import load_ring
from ..core.errors import InputError, StoreError
from ..core.hashing import listing, sha256_file
from ..core.jsonio import atomic_write_json, fsync_dir, read_json
from ..core.layout import RingLayout
from ..core.node_state import Node, read_node
from ..core.state import Ring
from ..weights.store import WeightsStore

MANIFEST = "MANIFEST.json"
SEARCH_WEIGHTS_DIR = "weights"

# The folders an example run names: placeholders a shell refuses as typed (a syntax error),
# so that an example followed to the letter makes nothing anywhere.
INPUTS = "<new inputs folder>"
PREDICTIONS = "<predictions folder>"


def _copy_object(store: WeightsStore, item: dict, dest: Path) -> None:
    """Copy one registered object to dest; its bytes must hash to the registered sha256."""
    source = store.objects / item["sha256"]
    if not source.is_file():
        raise StoreError(f"weights file {item['path']}: object {item['sha256']} is missing")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.unlink(missing_ok=True)
    shutil.copyfile(source, dest)
    os.chmod(dest, 0o644)
    actual = sha256_file(dest)
    if actual != item["sha256"]:
        dest.unlink()
        raise StoreError(
            f"weights file {item['path']}: object {item['sha256']} now hashes to {actual}"
        )


def _weights_of(ring: Ring, node: Node, store: WeightsStore, view: str) -> dict:
    """The registered weights of a node's seed-0 execution on one view, as the manifest
    lists them (files None when that execution trained nothing yet)."""
    spec = node.spec(view, "s0") or {}
    key = spec.get("key")
    entry = store.entry(node.tree_hash, key) if key else None
    return {
        "view": view,
        "key": key,
        "key_components": spec.get("key_components"),
        "train_seed": spec.get("train_seed"),
        "files": None
        if entry is None
        else [{k: f[k] for k in ("path", "size", "sha256")} for f in entry["files"]],
        "_entry": entry,
    }


def _example_argv(command: list[str], python: str | None) -> list[str]:
    """The command with the ring's interpreter in place of a bare `python`."""
    if python and command and command[0] in ("python", "python3"):
        return [python, *command[1:]]
    return list(command)


def how_to_run(command: list[str], per_view: bool, python: str | None = None) -> dict:
    """How to run the solution from the folder that holds its MANIFEST.json: final/solution/
    in the ring, or the folder `ringflow export RING DEST` wrote (DEST itself, no solution/
    inside), so the words name no folder of either. `python`: the candidates' interpreter
    the ring ran them with."""
    argv = " ".join(command)
    example = shlex.join([*_example_argv(command, python), "--seed", "0"])
    return {
        "working_directory": "this folder (the one that holds this MANIFEST.json)",
        "command": f"{argv} --seed 0",
        "environment": {
            "RINGFLOW_INPUT_DIR": "a folder of inputs laid out like a view's inputs/",
            "RINGFLOW_OUTPUT_DIR": "an empty folder; the predictions are written there",
            "RINGFLOW_SEED": "0",
        },
        "example": (
            f"mkdir -p {PREDICTIONS} && cd <this folder> && RINGFLOW_INPUT_DIR={INPUTS} "
            f"RINGFLOW_OUTPUT_DIR={PREDICTIONS} RINGFLOW_SEED=0 {example}"
        ),
        "weights": (
            "the weights trained on the final view lie at their declared paths, so the "
            "program loads them and does not retrain"
            if per_view
            else "this program trains no weights"
        ),
        "python": "python means the candidates' environment the ring ran them with"
        + (f": {python}" if python else ""),
    }


def complete_solution(layout: RingLayout, node_id: str, solution: Path) -> dict:
    """Add weights and MANIFEST.json to a copy of a node's submission at `solution`."""
    ring = load_ring(layout.root)
    node = read_node(layout.node_json(node_id))
    store = WeightsStore(ring.store)
    per_view = node.solution["per_view_paths"]
    os.chmod(solution, 0o755)
    views: dict[str, dict] = {}
    if per_view:
        final = ring.final_view
        for view in [final, *ring.search_views]:
            record = _weights_of(ring, node, store, view)
            entry = record.pop("_entry")
            base = solution if view == final else solution / SEARCH_WEIGHTS_DIR / view
            record["placed_under"] = "." if view == final else f"{SEARCH_WEIGHTS_DIR}/{view}"
            try:
                for item in (entry or {}).get("files", []):
                    _copy_object(store, item, base / item["path"])
            except (StoreError, OSError) as exc:
                # A damaged store must not stop final selection: the manifest says what lacks.
                record["problem"] = str(exc)
            views[view] = record
    code = [
        f
        for f in listing(solution)
        if f["path"] != MANIFEST
        and not f["path"].startswith(f"{SEARCH_WEIGHTS_DIR}/")
        and f["path"] not in per_view
    ]
    manifest = {
        "ring_id": ring.ring_id,
        "node": node_id,
        "role": node.role,
        "tree_hash": node.tree_hash,
        "task": {"name": ring.task.name, "direction": ring.task.direction},
        "code": code,
        "per_view_paths": per_view,
        "final_view": ring.final_view,
        "weights": views,
        "final_weights_complete": not per_view
        or bool(views[ring.final_view]["files"] and "problem" not in views[ring.final_view]),
        "environment": {"env_key": ring.env_key, **ring.environment},
        "run": how_to_run(node.solution["command"], bool(per_view), ring.program_python),
        "lineage_segments": (node.resume_origin or {}).get("segments", []),
        "written_at": time.time(),
    }
    atomic_write_json(solution / MANIFEST, manifest)
    return manifest


def export(ring_dir: str | Path, dest: str | Path) -> dict:
    """Write the ring's final choice, deployable, to `dest` (which must not exist yet)."""
    layout = RingLayout(Path(ring_dir).resolve())
    if not layout.ring_json.is_file():
        raise InputError(f"{ring_dir}: not a ring folder (RING.json not found)")
    final = layout.final_dir / "FINAL.json"
    if not final.is_file():
        raise InputError(f"{ring_dir}: no final/ written yet: nothing to export")
    chosen = read_json(final)["chosen"]
    dest = Path(dest).resolve()
    if dest.exists():
        raise InputError(f"export: {dest} already exists; give a new folder")
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        shutil.copytree(layout.submission(chosen), staging / "solution")
        manifest = complete_solution(layout, chosen, staging / "solution")
        os.chmod(staging, 0o755)
        (staging / "solution").rename(dest)
        fsync_dir(dest.parent)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return manifest
