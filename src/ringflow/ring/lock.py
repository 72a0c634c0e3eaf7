"""Locking a ring (RING.json): configuration, evaluation spec and clock, frozen at start."""

from __future__ import annotations

import hashlib
import os
import secrets
import time
from pathlib import Path

from filelock import FileLock

from .. import sandbox
from ..cluster.node_probe import probe_node
from ..cluster.target import SlurmTarget, read_target, slurm_problem
from ..config import guard_problems
from ..core import seeds
from ..core.disguise import salted_alias
from ..core.errors import InputError, MachineryError, SandboxError
from ..core.hashing import HashMemo, listing_hash, view_part_hashes
from ..core.jsonio import atomic_write_json, read_json, read_jsonl_objects, sha256_json
from ..core.layout import RingLayout
from ..core.ledger import Ledger, emit_event
from ..core.reserve import CutoffFile
from ..core.settings import RingConfig
from ..core.state import Ring
from ..sandbox.gpus import gpu_facts
from ..sandbox.interpreter import describe_interpreter
from ..sandbox.selftest import selftest
from ..task import Task, load_task, split_views
from ..weights import keys
from . import chain
from .inputs import record_snapshot, snapshot_path, take_snapshot

# Keys that may differ between the command that locked a ring and a later command that
# continues it: they name where things are, or the other rings of its chain, not what the
# ring computes.
# Who hears about a ring (notify) changes nothing it computes: a locked ring may add it.
UNFROZEN_KEYS = ("resources_dir", "rings", "notify", "slurm")


def _resolve(path: str, workdir: Path) -> Path:
    p = Path(path).expanduser()
    return (p if p.is_absolute() else workdir / p).resolve()


def resolve_paths(config: RingConfig, workdir: Path | None = None) -> dict:
    """Where the task, candidates, baseline, store and ring folder are (absolute)."""
    workdir = Path(workdir or os.getcwd())
    parent = chain.parent_lock(config.continue_from, workdir)
    if parent is not None:
        config = chain.parent_paths(config, parent)
    demo = not config.task
    if demo:
        from .. import demo as demo_task

        task_dir = demo_task.materialise_task(
            _resolve(config.resources_dir, workdir) / "demo" / "task"
        )
    else:
        task_dir = _resolve(config.task, workdir)
    if config.candidates:
        candidates = _resolve(config.candidates, workdir)
    elif demo:
        candidates = demo_task.candidates_dir()
    else:
        raise InputError("config: 'candidates' must name a folder of solution folders")
    baseline = config.baseline
    if baseline == "":
        if not demo:
            raise InputError(
                "config: 'baseline' must name a solution folder, or be null for no baseline"
            )
        baseline_dir = demo_task.baseline_dir()
    else:
        baseline_dir = None if baseline is None else _resolve(baseline, workdir)
    if not candidates.is_dir():
        raise InputError(f"config: candidates folder {candidates} not found")
    if baseline_dir is not None and not baseline_dir.is_dir():
        raise InputError(f"config: baseline folder {baseline_dir} not found")
    ring_dir = _resolve(config.runs_dir, workdir) / config.ring_id
    previous = None
    if config.continue_from:
        previous = _resolve(config.continue_from, workdir)
        if not RingLayout(previous).ring_json.is_file():
            raise InputError(f"config: continue_from {previous} is not a ring (no RING.json)")
    if parent is not None:
        task = load_task(task_dir)
        chain.check_same_task(parent, task.name, task.direction, task_dir)
    return {
        "parent": parent,
        "task": task_dir,
        "candidates": candidates,
        "baseline": baseline_dir,
        "store": _resolve(config.store, workdir),
        "ring": ring_dir,
        "previous": previous,
        "workdir": workdir,
    }


def _frozen(config: RingConfig) -> dict:
    return {k: v for k, v in config.to_mapping().items() if k not in UNFROZEN_KEYS}


def program_python(config: RingConfig) -> Path:
    """The candidates' interpreter (keys.program_python), refused clearly when missing."""
    path = keys.program_python(config.program)
    if not config.program.python and not path.exists():
        raise InputError(
            f"config: program.python is not set and {path} does not exist; build it with "
            "`make setup` or name your environment's interpreter in program.python"
        )
    return path


def _input_hashes(listing: list[dict]) -> dict[str, str]:
    return {
        e["path"].removeprefix("inputs/"): e["sha256"]
        for e in listing
        if e["path"].startswith("inputs/")
    }


def lock_sandbox(config: RingConfig, layout: RingLayout, python: Path) -> tuple[dict, dict]:
    """The sandbox and program interpreter the ring runs with, tried for real.

    Refuses (MachineryError) when no sandbox can be had, unless sandbox.mode is none, or
    when the interpreter does not run in it: nothing would run and every candidate would
    look bad.
    """
    try:
        info = sandbox.require_sandbox(config.sandbox)
        program = describe_interpreter(python)
        selftest(info, program, config.sandbox, layout.boxes)
    except SandboxError as exc:
        raise MachineryError(f"ring {layout.root} cannot start: {exc}") from None
    return info, program


def check_ancestors(previous: Path | None) -> None:
    """Refuse to continue from a chain whose rings are missing, tainted or whose ledgers do
    not verify, checked back to the first ring (docs/operations.md#chains)."""
    from .ancestry import check_ancestry

    check_ancestry(previous)
    if previous is None:
        return
    # The ledger verifies; its lock entry must still match each lock file (guard seeds).
    for ancestor in seeds.chain_rings(previous):
        problems = lock_anchor_problems(Path(ancestor.ring_dir))
        if problems:
            raise InputError(
                f"refusing to continue from {previous}: ancestor {ancestor.ring_dir} does not "
                f"verify ({'; '.join(problems[:3])})"
            )


def scorer_version(task: Task) -> str:
    """Hash of the task folder outside views/: task.yaml, scorer, validator and helpers."""
    digest = hashlib.sha256()
    for path in sorted(task.dir.rglob("*")):
        rel = path.relative_to(task.dir)
        if rel.parts[0] == "views" or not path.is_file() or "__pycache__" in rel.parts:
            continue
        digest.update(rel.as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def views_limits(config: RingConfig, views) -> dict[str, dict]:
    """Each view's limits: `limits`, with that view's `limits_per_view` entry laid over it."""
    per_view = config.limits_per_view
    unknown = sorted(set(per_view) - set(views))
    if unknown:
        raise InputError(
            f"config: limits_per_view names {', '.join(unknown)}, not a view of this ring "
            f"(views: {', '.join(views)})"
        )
    limits = config.limits.to_mapping()
    return {view: {**limits, **(per_view.get(view) or {})} for view in views}


def lock_ring(config: dict, workdir: Path | None = None, now: float | None = None) -> Ring:
    """Create RING.json, the view manifests and the live cutoff, or return the existing lock.

    `config` is the ring's validated configuration as Snakemake holds it, read here once
    as a `RingConfig`. A ring is locked once: a later command with a different
    configuration is refused, so no work is ever described as done under a configuration
    it did not run with.
    """
    settings = RingConfig.from_mapping(config)
    paths = resolve_paths(settings, workdir)
    layout = RingLayout(paths["ring"])
    layout.root.mkdir(parents=True, exist_ok=True)
    layout.locks.mkdir(exist_ok=True)
    with FileLock(str(layout.locks / "ring.lock")):
        if layout.ring_json.exists():
            ring = Ring.from_record(read_json(layout.ring_json), source=layout.ring_json)
            check_config_matches(ring, settings)
            return ring
        return _create(settings, paths, layout, time.time() if now is None else now)


def timeline_problem(config: RingConfig) -> str | None:
    """Why the ring's timeline leaves no time to search, or None.

    Checked on the ring's whole configuration (a chain ring's inherited keys included) at
    its lock: a cutoff at or before the start would cut every execution at once."""
    timeline = config.timeline
    duration, reserve = timeline.duration_min, timeline.final_reserve_min
    if reserve >= duration:
        return (
            f"timeline.final_reserve_min ({reserve:g}) is not shorter than "
            f"timeline.duration_min ({duration:g}): the search's cutoff (duration - final "
            "reserve) would come before the ring starts and every execution would be cut at "
            "once; lengthen duration_min or shorten final_reserve_min"
        )
    tail = timeline.node_tail_min
    if config.engineer.command and tail >= duration - reserve:
        return (
            f"timeline.node_tail_min ({tail:g}) is not shorter than the search's "
            f"{duration - reserve:g} min (duration_min - final_reserve_min): engineer "
            "sessions would have no time before the hand-over point; shorten node_tail_min "
            "or lengthen duration_min"
        )
    return None


def gpu_problem(config: RingConfig, layout: RingLayout) -> str | None:
    """Why a ring run with a GPU profile cannot have the GPUs it asks for, or None.

    slots.json is written as the workflow starts, before the lock: it says whether the
    profile declared GPUs and how many NVML found here. Running on the CPU instead would
    record `gpus` it never had and train weights keyed for no GPU."""
    if not layout.slots.is_file() or not config.gpus_per_execution:
        return None
    slots = read_json(layout.slots)
    if not slots.get("gpu_profile") or slots.get("gpus"):
        return None
    why = gpu_facts().get("reason") or "NVML sees no GPU on this machine"
    return (
        f"the profile asks for GPUs (gpus_per_execution: {config.gpus_per_execution}) and "
        f"this machine has none ({why}). Run on the CPU with `--config gpus_per_execution=0`, "
        "or with the local profile (`--profile profiles/local`)"
    )


def probe_cluster_node(
    config: RingConfig, layout: RingLayout, store: Path, target: SlurmTarget
) -> dict:
    """Under the SLURM executor, one probe job on the partition: the node's sandbox, the
    candidates' interpreter, the ring folder and the store as the node sees them, and its
    GPUs where executions ask for them; kept in cluster_node.json, refused with every
    problem found (docs/slurm.md#compute-nodes-are-probed)."""
    gpus = int(config.gpus_per_execution or 0) if target.gpus else 0
    try:
        facts = probe_node(
            config.ring_id,
            {"ring folder": layout.root, "store": store},
            program_python(config),
            config.sandbox.to_mapping(),
            target,
            gpus,
        )
    except InputError as exc:
        raise InputError(f"ring {config.ring_id} cannot start: {exc}") from None
    atomic_write_json(layout.cluster_node, facts)
    return facts


def _gpu_of(node: dict) -> dict:
    """The lock's `gpu` facts from the probed node: the executions' GPUs, not the driver's."""
    return {key: value for key, value in node["gpu"].items() if key != "ok"}


def _create(config: RingConfig, paths: dict, layout: RingLayout, now: float) -> Ring:
    if problem := timeline_problem(config):
        raise InputError(f"ring {config.ring_id}: {problem}")
    if problem := gpu_problem(config, layout):
        raise InputError(f"ring {config.ring_id} cannot start: {problem}")
    # Under the SLURM executor: requests no node of the partition can meet would pend forever.
    target = read_target(layout.root)
    if problem := slurm_problem(config.to_mapping(), target):
        raise InputError(f"ring {config.ring_id} cannot start: {problem}")
    for problem in guard_problems(config.to_mapping()):
        raise InputError(f"ring {config.ring_id}: {problem}")
    task = load_task(paths["task"])
    sandbox_info, program = lock_sandbox(config, layout, program_python(config))
    alias_salt = secrets.token_hex(16)
    search_views, guard_views, final_view = split_views(
        task,
        list(config.views.search),
        config.views.final,
        None if config.views.guard is None else list(config.views.guard),
    )
    store = paths["store"]
    store.mkdir(parents=True, exist_ok=True, mode=0o700)
    node = None if target is None else probe_cluster_node(config, layout, store, target)
    memo = HashMemo(store / "cache" / "hashmemo.json")
    limits = config.limits.to_mapping()
    per_view = views_limits(config, (*search_views, *guard_views, final_view))
    views = {}
    world_readable = sandbox_info["mode"] == "root"
    for view in (*search_views, *guard_views, final_view):
        inputs = task.view_dir(view) / "inputs"
        snapshot = snapshot_path(layout.root, salted_alias(alias_salt, view, "real"))
        take_snapshot(inputs, snapshot, world_readable)
        parts = view_part_hashes(task.view_dir(view), memo)
        listing = [{**entry, "path": f"{part}/{entry['path']}"}
                   for part, (_, entries) in parts.items() for entry in entries]  # fmt: skip
        views[view] = {
            "name": view,
            "dir": str(task.view_dir(view)),
            "content_hash": listing_hash(listing),
            # Weights keys take the inputs only; the labels belong to the evaluation.
            "inputs_hash": parts["inputs"][0],
            "labels_hash": parts["labels"][0],
            "files": len(listing),
            "bytes": sum(entry["size"] for entry in listing),
            "input_bytes": sum(e["size"] for e in listing if e["path"].startswith("inputs/")),
            "limits": per_view[view],
            "inputs_snapshot": str(snapshot),
            "inputs_files": record_snapshot(inputs, snapshot, _input_hashes(listing)),
        }
    environment, environment_stamp = keys.environment_for(config, memo)
    memo.save()
    for view in views:
        # The thread count is part of the environment key (docs/contracts.md#weights): a view run
        # with other threads keys its weights with its own environment.
        threads = views[view]["limits"]["threads"]
        view_env = (
            environment if threads == limits["threads"] else {**environment, "threads": threads}
        )
        views[view]["env_key"] = sha256_json(view_env)
        atomic_write_json(layout.view_manifest(view), views[view])
    evaluation = {
        "task": task.name,
        "direction": task.direction,
        "views": {
            v: {"inputs": views[v]["inputs_hash"], "labels": views[v]["labels_hash"]}
            for v in search_views
        },
        "search_views": search_views,
        "limits": limits,
        "view_limits": {v: views[v]["limits"] for v in search_views},
        "scorer_version": scorer_version(task),
        # The candidates' environment as each search view runs it (docs/operations.md#chains): new
        # library versions change scores, so they change the search hash too.
        "env_keys": {v: views[v]["env_key"] for v in search_views},
    }
    check_ancestors(paths["previous"])
    guard_views, guard_history = chain.fresh_guard_views(
        paths["previous"], guard_views, views, configured=config.views.guard is not None
    )
    seed_plan = seeds.SeedRegistry(store).allocate(
        layout.root, config.ring_id, paths["previous"], config.guard.seeds
    )
    duration_s = config.timeline.duration_min * 60
    stop_at = now + duration_s
    cutoff = stop_at - config.timeline.final_reserve_min * 60
    previous = paths["previous"]
    record = {
        "ring_id": config.ring_id,
        "ring_dir": str(layout.root),
        "created_at": now,
        "start": now,
        "stop_at": stop_at,
        "initial_cutoff": cutoff,
        "config": config.to_mapping(),
        "config_sha256": sha256_json(_frozen(config)),
        "task": task.to_dict(),
        "candidates_dir": str(paths["candidates"]),
        "baseline_dir": None if paths["baseline"] is None else str(paths["baseline"]),
        "store": str(store),
        "views": views,
        "search_views": search_views,
        # Views only the guard scores; empty: the guard re-uses search rows
        # (docs/contracts.md#view-roles).
        "guard_views": guard_views,
        # The chain's earlier use of the task's guard views (docs/guard.md#the-incumbent).
        "guard_view_history": guard_history,
        "guard_views_reused": bool((guard_history or {}).get("reused")),
        "final_view": final_view,
        "evaluation": evaluation,
        "search_hash": sha256_json(evaluation),
        "environment": environment,
        "environment_stamp": environment_stamp,
        "env_key": sha256_json(environment),
        "program_python": program["path"],
        # Solution files left out of tree hashes and working copies (documentation).
        "tree_ignore": list(config.tree_ignore),
        "guard_seeds": seed_plan["guard_seeds"],
        "chain_exposed_seeds": seed_plan["chain_exposed_seeds"],
        "continue_from": None if previous is None else os.path.relpath(previous, layout.root),
        "sandbox": {k: sandbox_info.get(k) for k in ("mode", "reason")},
        "program": program,
        # GPU models, driver and CUDA: part of the environment of executions given GPUs.
        "gpu": gpu_facts() if node is None or "gpu" not in node else _gpu_of(node),
        "chain": chain.describe(paths["parent"], config, paths),
        # Names the programs see for views (selection.disguise.alias); never in their reach.
        "alias_salt": alias_salt,
    }
    CutoffFile(layout.cutoff).ensure(cutoff, reserve_min=config.timeline.final_reserve_min)
    atomic_write_json(layout.ring_json, record, mode=0o444)
    ring = Ring.from_record(record, source=layout.ring_json)
    Ledger(layout.ledger).append(
        "ring_locked",
        ring_id=ring.ring_id,
        config_sha256=ring.config_sha256,
        search_hash=ring.search_hash,
        env_key=ring.env_key,
        guard_seeds=ring.guard_seeds,
        seeds_sha256=seeds.seeds_digest(ring.guard_seeds, ring.chain_exposed_seeds),
        lock_sha256=sha256_json(ring.to_record()),
    )
    emit_event(layout.root, "ring_started", start=now, stop_at=stop_at, cutoff=cutoff)
    return ring


def config_differences(ring: Ring, config: RingConfig) -> list[str]:
    """The configuration keys in which `config` differs from the one `ring` was locked
    with."""
    frozen = _frozen(ring.config)
    given = _frozen(config)
    if sha256_json(frozen) == sha256_json(given):
        return []
    return sorted(k for k in set(frozen) | set(given) if frozen.get(k) != given.get(k))


def check_config_matches(ring: Ring, config: RingConfig) -> None:
    differ = config_differences(ring, config)
    if not differ:
        return
    raise InputError(
        f"ring {ring.ring_dir} is locked with another configuration "
        f"(differs in: {', '.join(differ)}); use a new ring_id to run with this one"
    )


def check_existing_lock(config: RingConfig, workdir: Path | None = None) -> None:
    """At workflow start: refuse to continue a ring under a changed configuration."""
    workdir = Path(workdir or os.getcwd())
    lock = RingLayout(_resolve(config.runs_dir, workdir) / config.ring_id).ring_json
    if lock.is_file():
        check_config_matches(Ring.from_record(read_json(lock), source=lock), config)


def lock_anchor_problems(ring_dir: Path) -> list[str]:
    """The lock file against its ledger entry: an edited RING.json (its guard seeds or
    exposed seeds above all, which decide the seeds of every later ring) no longer matches.
    """
    layout = RingLayout(Path(ring_dir))
    try:
        lock = read_json(layout.ring_json)
        entries = [e for e in read_jsonl_objects(layout.ledger) if e.get("kind") == "ring_locked"]
    except (InputError, OSError) as exc:
        return [f"lock: {exc}"]
    if not entries:
        return [f"lock: {layout.ledger} has no ring_locked entry to check RING.json against"]
    entry = entries[0]
    if "seeds_sha256" not in entry or "lock_sha256" not in entry:
        return [
            f"lock: the ledger's lock entry of {layout.root} records no hash of RING.json "
            "(locked by an older ringflow), so its guard seeds cannot be checked"
        ]
    problems = []
    seeds_hash = seeds.seeds_digest(lock.get("guard_seeds"), lock.get("chain_exposed_seeds"))
    if entry.get("seeds_sha256") != seeds_hash:
        problems.append(
            f"lock: guard_seeds or chain_exposed_seeds in {layout.ring_json} do not match the "
            "ledger's lock entry (edited after the ring was locked)"
        )
    if entry.get("lock_sha256") != sha256_json(lock):
        problems.append(f"lock: {layout.ring_json} does not match the ledger's lock entry")
    return problems
