"""One execution of a node's program on one view under one seed and variant (SPEC 3, 6, 7).

Order of work: refuse a changed environment, prepare a private working copy, settle the
weights mode under the key lock (replay, or train while holding it), run the program in the
sandbox under the supervisor, register trained weights, write result.json. A failing
candidate is a recorded status here, never an exception.
"""

from __future__ import annotations

import os
import time
from contextlib import ExitStack
from pathlib import Path

from . import keys, sandbox, statuses
from .candidate import PROGRESS_FILE, weights_dirs
from .disguise import alias, disguised_inputs
from .errors import AcceptanceError, DeadlineReached, ReplayCheckFailed, RingflowError
from .jsonio import atomic_write_json, read_json
from .layout import RingLayout
from .ledger import Ledger, emit_event
from .nodes import load_node
from .ring import deadline_for, load_ring
from .store import WeightsStore
from .supervisor import HealthSettings, ResourceLimits, supervise
from .task import command_argv
from .workcopy import link_tree, reset_dir

THREAD_VARS = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "NUMEXPR_MAX_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "BLIS_NUM_THREADS",
)


def thread_env(threads: int) -> dict[str, str]:
    return {name: str(threads) for name in THREAD_VARS}


def check_environment(ring: dict) -> None:
    env = keys.environment(ring["config"]["limits"]["threads"])
    if keys.environment_key(env) != ring["env_key"]:
        frozen = ring["environment"]
        differ = sorted(k for k in set(env) | set(frozen) if env.get(k) != frozen.get(k))
        raise RingflowError(
            f"this job's environment differs from the one frozen in {ring['ring_dir']}/RING.json "
            f"(in: {', '.join(differ)}); weights keys would not match, so it refuses to run"
        )


def _base_result(node: str, view: str, variant: str, spec: dict) -> dict:
    return {
        "node": node,
        "view": view,
        "variant": variant,
        "seed": spec["seed"],
        "ablate": spec["ablate"],
        "status": statuses.INTERRUPTED,
        "budget_cut": False,
        "exit_code": None,
        "signal": None,
        "wall_s": 0.0,
        "cpu_s": 0.0,
        "weights_mode": statuses.NONE,
        "weights_key": spec.get("key"),
        "reap_left": [],
        "reason": "",
        "started_at": time.time(),
    }


def _hidden_paths(ring: dict) -> tuple[Path, ...]:
    task_views = Path(ring["task"]["dir"]) / "views"
    labels = [task_views / view / "labels" for view in ring["task"]["views"]]
    return (*labels, Path(ring["store"]))


def _weights_for(
    spec: dict,
    store: WeightsStore,
    tree: str,
    work: Path,
    solution: dict,
    stack: ExitStack,
    should_stop,
    verify: str,
) -> tuple[str, str | None]:
    """Settle the weights mode; while training, the key lock stays held (on `stack`)."""
    if spec["weights"] == "none":
        return statuses.NONE, None
    per_view = solution["per_view_paths"]
    if spec["weights"] == "fresh":
        return statuses.FRESH, None
    key = spec["key"]
    stack.enter_context(store.key_lock(key, should_stop=should_stop))
    entry = store.entry(tree, key)
    if entry is not None:
        method = store.replay_into(entry, work, verify=verify)
        stack.close()
        return statuses.REPLAY, method
    store.make_private(work, per_view)
    return statuses.TRAIN, None


def run_execution(ring_dir: str | Path, node_id: str, view: str, variant: str) -> dict:
    ring = load_ring(ring_dir)
    check_environment(ring)
    layout = RingLayout(Path(ring["ring_dir"]))
    node = load_node(ring, node_id)
    if node["status"] != "ready":
        raise RingflowError(f"node {node_id} was rejected at import: {node.get('error')}")
    try:
        spec = node["executions"][view][variant]
    except KeyError:
        raise RingflowError(f"node {node_id} has no execution {view}/{variant}") from None
    exec_dir = layout.exec_dir(node_id, view, variant)
    exec_dir.mkdir(parents=True, exist_ok=True)
    result = _base_result(node_id, view, variant, spec)
    deadline = deadline_for(ring, view, variant)

    def should_stop() -> str | None:
        return "deadline passed" if deadline() <= time.time() else None

    if should_stop():
        result.update(budget_cut=True, reason="not started: the deadline had passed")
        return _finish(layout, exec_dir, result)

    work = reset_dir(exec_dir / "work") / "solution"
    link_tree(layout.submission(node_id), work)
    output = reset_dir(exec_dir / "output")
    health_dir = reset_dir(exec_dir / "health")
    config = ring["config"]
    store = WeightsStore(ring["store"])
    solution = node["solution"]
    blind = variant == "blind-s0"
    inputs = disguised_inputs(ring, view) if blind else Path(ring["views"][view]["dir"]) / "inputs"
    view_name = alias(ring, view) if blind else view

    with ExitStack() as stack:
        try:
            mode, method = _weights_for(
                spec,
                store,
                node["tree_hash"],
                work,
                solution,
                stack,
                should_stop,
                config["replay_verify"],
            )
        except DeadlineReached as exc:
            result.update(budget_cut=True, reason=f"gave up waiting for the weights lock: {exc}")
            return _finish(layout, exec_dir, result)
        except ReplayCheckFailed as exc:
            result.update(weights_mode=statuses.REPLAY, reason=f"replay check failed: {exc}")
            emit_event(
                layout.root,
                "replay_check_failed",
                node=node_id,
                view=view,
                variant=variant,
                file=exc.path,
                reason=exc.reason,
            )
            return _finish(layout, exec_dir, result)
        result.update(weights_mode=mode, replay_method=method)
        writable: tuple[Path, ...] = ()
        if mode in (statuses.TRAIN, statuses.FRESH):
            writable = tuple(work / d for d in weights_dirs(solution["per_view_paths"]))
            for folder in writable:
                folder.mkdir(parents=True, exist_ok=True)
        outcome, plan = _run_program(
            ring,
            node,
            spec,
            view_name,
            variant,
            work,
            inputs,
            output,
            health_dir,
            exec_dir,
            writable,
            deadline,
            blind,
        )
        result.update(outcome)
        result["sandbox"] = plan
        if mode == statuses.TRAIN and result["status"] == statuses.OK:
            _register(ring, layout, store, node, view, variant, spec, work, result)
    return _finish(layout, exec_dir, result)


def _run_program(
    ring,
    node,
    spec,
    view_name,
    variant,
    work,
    inputs,
    output,
    health_dir,
    exec_dir,
    writable,
    deadline,
    blind,
) -> tuple[dict, dict]:
    config = ring["config"]
    threads = config["limits"]["threads"]
    argv = command_argv(" ".join(node["solution"]["command"]))
    argv += ["--seed", str(spec["seed"])]
    if spec["ablate"]:
        argv.append("--ablate")
    base_env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "PYTHONDONTWRITEBYTECODE": "1",
        "RINGFLOW_VIEW": view_name,
        "RINGFLOW_SEED": str(spec["seed"]),
        **thread_env(threads),
    }
    request = sandbox.SandboxRequest(
        solution_dir=work,
        input_dir=inputs,
        output_dir=output,
        progress_file=work / PROGRESS_FILE,
        writable_dirs=writable,
        hidden_paths=_hidden_paths(ring),
        blind=blind,
        uid=config["sandbox"]["uid"],
        gid=config["sandbox"]["gid"],
        staging_root=Path(config["sandbox"]["staging_root"])
        if config["sandbox"]["staging_root"]
        else None,
    )
    weights_rel = weights_dirs(node["solution"]["per_view_paths"])
    plan = sandbox.plan(request, argv, base_env, weights_rel[0] if weights_rel else None)
    try:
        outcome = supervise(
            plan.argv,
            cwd=plan.cwd,
            env=plan.env,
            stdout_path=exec_dir / "stdout.log",
            stderr_path=exec_dir / "stderr.log",
            health_dir=health_dir,
            settings=HealthSettings.from_config(config["exec_health"]),
            limits=ResourceLimits.from_config(config["limits"]),
            deadline=deadline,
            watch_output=[output],
            watch_writable=list(writable),
            progress_file=work / PROGRESS_FILE,
            wrappers=plan.wrappers,
        )
    finally:
        plan.finish()
    sandbox_info = {
        "mode": plan.mode,
        "network_isolated": plan.network_isolated,
        "notes": plan.notes,
    }
    record = outcome.to_dict()
    fields = (
        "status",
        "budget_cut",
        "exit_code",
        "signal",
        "wall_s",
        "cpu_s",
        "reap_left",
        "reason",
        "events",
        "limits",
    )
    result = {k: record[k] for k in fields}
    result["health"] = {"jsonl": record["health_jsonl"], "latest": record["health_latest"]}
    return result, sandbox_info


def _register(ring, layout, store, node, view, variant, spec, work, result) -> None:
    if result["reap_left"]:
        result["reason"] = "weights not registered: processes were left after the stop"
        return
    who = {"ring": ring["ring_id"], "node": node["id"], "execution": f"{view}/{variant}"}
    limit = int(ring["config"]["max_weights_gb"] * 1024**3)
    try:
        entry, created = store.register(
            node["tree_hash"], spec["key"], work, node["solution"]["per_view_paths"], who, limit
        )
    except AcceptanceError as exc:
        result.update(status=statuses.CRASH, reason=f"weights not accepted: {exc}")
        return
    if created:
        Ledger(layout.ledger).append(
            "weights_registered",
            key=spec["key"],
            tree=node["tree_hash"],
            node=node["id"],
            view=view,
            variant=variant,
            files=[{"path": f["path"], "sha256": f["sha256"]} for f in entry["files"]],
        )


def _finish(layout: RingLayout, exec_dir: Path, result: dict) -> dict:
    result["ended_at"] = time.time()
    atomic_write_json(exec_dir / "result.json", result)
    emit_event(
        layout.root,
        "execution_finished",
        node=result["node"],
        view=result["view"],
        variant=result["variant"],
        status=result["status"],
        budget_cut=result["budget_cut"],
        weights_mode=result["weights_mode"],
    )
    return result


def read_result(layout: RingLayout, node: str, view: str, variant: str) -> dict | None:
    path = layout.result(node, view, variant)
    return read_json(path) if path.exists() else None
