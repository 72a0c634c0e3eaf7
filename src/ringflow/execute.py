"""One execution of a node's program on one view under one seed and variant (SPEC 3, 6, 7).

Order of work: refuse a changed environment, prepare a private working copy, settle the
weights mode under the key lock (replay, or train while holding it), run the program in the
sandbox under the supervisor, register trained weights, write result.json. A failing
candidate is a recorded status here, never an exception.
"""

from __future__ import annotations

import json
import os
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from . import sandbox, statuses
from .candidate import weights_dirs
from .errors import (
    AcceptanceError,
    DeadlineReached,
    ReplayCheckFailed,
    RingflowError,
    SandboxError,
)
from .jsonio import atomic_write_json
from .ring.clock import deadline_for, load_node, load_ring, view_limits
from .ring.layout import RingLayout
from .ring.ledger import Ledger, emit_event
from .selection.disguise import alias, disguised_inputs
from .supervisor import HealthSettings, ResourceLimits, supervise
from .task import command_argv
from .weights import keys
from .weights.hashing import PROGRESS_FILE
from .weights.store import WeightsStore
from .workcopy import link_tree, reset_dir, unshare_files

THREAD_VARS = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "NUMEXPR_MAX_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "BLIS_NUM_THREADS",
)
OUTCOME_FIELDS = (
    "status", "budget_cut", "exit_code", "signal", "wall_s", "cpu_s", "reap_left", "reason",
    "events", "limits",
)  # fmt: skip


def thread_env(threads: int) -> dict[str, str]:
    return dict.fromkeys(THREAD_VARS, str(threads))


def check_environment(ring: dict) -> None:
    env = keys.environment(ring["config"]["limits"]["threads"])
    if keys.environment_key(env) != ring["env_key"]:
        frozen = ring["environment"]
        differ = sorted(k for k in set(env) | set(frozen) if env.get(k) != frozen.get(k))
        raise RingflowError(
            f"this job's environment differs from the one frozen in {ring['ring_dir']}/RING.json "
            f"(in: {', '.join(differ)}); weights keys would not match, so it refuses to run"
        )


@dataclass
class Execution:
    """Everything one execution needs, resolved once."""

    ring: dict
    layout: RingLayout
    node: dict
    view: str
    variant: str
    spec: dict
    dir: Path
    deadline: object

    @property
    def config(self) -> dict:
        return self.ring["config"]

    @property
    def blind(self) -> bool:
        return self.variant == "blind-s0"

    @property
    def work(self) -> Path:
        return self.dir / "work" / "solution"

    def should_stop(self) -> str | None:
        return "deadline passed" if self.deadline() <= time.time() else None


def _load(ring_dir, node_id: str, view: str, variant: str) -> Execution:
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
    folder = layout.exec_dir(node_id, view, variant)
    folder.mkdir(parents=True, exist_ok=True)
    return Execution(ring, layout, node, view, variant, spec, folder,
                     deadline_for(ring, view, variant))  # fmt: skip


def _new_result(ex: Execution) -> dict:
    return {
        "node": ex.node["id"],
        "view": ex.view,
        "variant": ex.variant,
        "seed": ex.spec["seed"],
        "ablate": ex.spec["ablate"],
        "status": statuses.INTERRUPTED,
        "budget_cut": False,
        "exit_code": None,
        "signal": None,
        "wall_s": 0.0,
        "cpu_s": 0.0,
        "weights_mode": statuses.NONE,
        "weights_key": ex.spec.get("key"),
        "reap_left": [],
        "reason": "",
        "started_at": time.time(),
    }


def run_execution(ring_dir: str | Path, node_id: str, view: str, variant: str) -> dict:
    ex = _load(ring_dir, node_id, view, variant)
    result = _new_result(ex)
    if ex.should_stop():
        result.update(budget_cut=True, reason="not started: the deadline had passed")
        return _finish(ex, result)
    reset_dir(ex.dir / "work")
    link_tree(ex.layout.submission(node_id), ex.work)
    store = WeightsStore(ex.ring["store"])
    with ExitStack() as lock:
        try:
            mode, method = _settle_weights(ex, store, lock)
        except DeadlineReached as exc:
            result.update(budget_cut=True, reason=f"gave up waiting for the weights lock: {exc}")
            return _finish(ex, result)
        except ReplayCheckFailed as exc:
            # Never a silent retrain: the run stops here and says which file (SPEC 6).
            result.update(weights_mode=statuses.REPLAY, reason=f"replay check failed: {exc}")
            emit_event(ex.layout.root, "replay_check_failed", node=node_id, view=view,
                       variant=variant, file=exc.path, reason=exc.reason)  # fmt: skip
            return _finish(ex, result)
        result.update(weights_mode=mode, replay_method=method)
        try:
            result.update(_run_program(ex, training=mode in (statuses.TRAIN, statuses.FRESH)))
        except SandboxError as exc:
            result.update(status=statuses.CRASH, reason=f"the sandbox could not start it: {exc}")
            return _finish(ex, result)
        if mode == statuses.TRAIN and result["status"] == statuses.OK:
            _register(ex, store, result)
    return _finish(ex, result)


def _settle_weights(ex: Execution, store: WeightsStore, lock: ExitStack):
    """(weights mode, replay method); a training keeps the key lock held on `lock`."""
    if ex.spec["weights"] == "none":
        return statuses.NONE, None
    if ex.spec["weights"] == "fresh":
        return statuses.FRESH, None
    key = ex.spec["key"]
    lock.enter_context(store.key_lock(key, should_stop=ex.should_stop))
    entry = store.entry(ex.node["tree_hash"], key)
    if entry is not None:
        method = store.replay_into(entry, ex.work, verify=ex.config["replay_verify"])
        lock.close()
        return statuses.REPLAY, method
    store.make_private(ex.work, ex.node["solution"]["per_view_paths"])
    return statuses.TRAIN, None


def _program_env(ex: Execution) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "PYTHONDONTWRITEBYTECODE": "1",
        # Every run sees an alias, so a view-blind run looks like any other.
        "RINGFLOW_VIEW": alias(ex.ring, ex.view, "disguised" if ex.blind else "real"),
        "RINGFLOW_SEED": str(ex.spec["seed"]),
        **thread_env(view_limits(ex.ring, ex.view)["threads"]),
    }


def _hidden_paths(ring: dict) -> tuple[Path, ...]:
    task_views = Path(ring["task"]["dir"]) / "views"
    labels = [task_views / view / "labels" for view in ring["task"]["views"]]
    return (*labels, Path(ring["store"]))


def _sandbox_request(ex: Execution, output: Path, writable: tuple[Path, ...]):
    box = ex.config["sandbox"]
    inputs = (disguised_inputs(ex.ring, ex.view) if ex.blind
              else Path(ex.ring["views"][ex.view]["dir"]) / "inputs")  # fmt: skip
    return sandbox.SandboxRequest(
        solution_dir=ex.work,
        input_dir=inputs,
        output_dir=output,
        progress_file=ex.work / PROGRESS_FILE,
        writable_dirs=writable,
        hidden_paths=_hidden_paths(ex.ring),
        blind=ex.blind,
        uid=box["uid"],
        gid=box["gid"],
        staging_root=Path(box["staging_root"]) if box["staging_root"] else None,
    )


def _run_program(ex: Execution, training: bool) -> dict:
    output = reset_dir(ex.dir / "output")
    health_dir = reset_dir(ex.dir / "health")
    weights_rel = weights_dirs(ex.node["solution"]["per_view_paths"])
    writable = tuple(ex.work / d for d in weights_rel) if training else ()
    for folder in writable:
        folder.mkdir(parents=True, exist_ok=True)
        unshare_files(folder)
    argv = command_argv(" ".join(ex.node["solution"]["command"]))
    argv += ["--seed", str(ex.spec["seed"]), *(["--ablate"] if ex.spec["ablate"] else [])]
    sandbox.probe_for(ex.config["sandbox"])
    plan = sandbox.plan(_sandbox_request(ex, output, writable), argv, _program_env(ex),
                        weights_rel[0] if weights_rel else None)  # fmt: skip
    try:
        outcome = supervise(
            plan.argv,
            cwd=plan.cwd,
            env=plan.env,
            stdout_path=ex.dir / "stdout.log",
            stderr_path=ex.dir / "stderr.log",
            health_dir=health_dir,
            settings=HealthSettings.from_config(ex.config["exec_health"]),
            limits=ResourceLimits.from_config(view_limits(ex.ring, ex.view)),
            deadline=ex.deadline,
            watch_output=[output],
            watch_writable=list(writable),
            progress_file=ex.work / PROGRESS_FILE,
            wrappers=plan.wrappers,
        )
    finally:
        plan.finish()
    if plan.mode != "bwrap":
        _announce_degraded_sandbox(ex.layout, plan)
    record = outcome.to_dict()
    return {
        **{k: record[k] for k in OUTCOME_FIELDS},
        "health": {"jsonl": record["health_jsonl"], "latest": record["health_latest"]},
        "sandbox": {
            "mode": plan.mode,
            "network_isolated": plan.network_isolated,
            "notes": plan.notes,
        },
    }


def _announce_degraded_sandbox(layout: RingLayout, plan) -> None:
    """Say once per ring that programs run without bubblewrap (no network isolation)."""
    marker = layout.root / "sandbox_degraded.json"
    try:
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return
    with os.fdopen(fd, "w") as handle:
        json.dump({"mode": plan.mode, "notes": plan.notes}, handle)
    emit_event(layout.root, "sandbox_degraded", mode=plan.mode, notes=plan.notes)
    print(f"ringflow: warning: sandbox mode {plan.mode}: {'; '.join(plan.notes)}", file=sys.stderr)


def _register(ex: Execution, store: WeightsStore, result: dict) -> None:
    if result["reap_left"]:
        # A tree that could not be fully stopped may still be writing (SPEC 7.4).
        result["reason"] = "weights not registered: processes were left after the stop"
        return
    node, key = ex.node, ex.spec["key"]
    who = {"ring": ex.ring["ring_id"], "node": node["id"], "execution": f"{ex.view}/{ex.variant}"}
    limit = int(ex.config["max_weights_gb"] * 1024**3)
    paths = node["solution"]["per_view_paths"]
    try:
        entry, created = store.register(node["tree_hash"], key, ex.work, paths, who, limit)
    except AcceptanceError as exc:
        result.update(status=statuses.CRASH, reason=f"weights not accepted: {exc}")
        return
    if created:
        files = [{"path": f["path"], "sha256": f["sha256"]} for f in entry["files"]]
        Ledger(ex.layout.ledger).append(
            "weights_registered", key=key, tree=node["tree_hash"], node=node["id"],
            view=ex.view, variant=ex.variant, files=files,
        )  # fmt: skip


def _finish(ex: Execution, result: dict) -> dict:
    result["ended_at"] = time.time()
    atomic_write_json(ex.dir / "result.json", result)
    emit_event(ex.layout.root, "execution_finished", node=result["node"], view=result["view"],
               variant=result["variant"], status=result["status"],
               budget_cut=result["budget_cut"], weights_mode=result["weights_mode"])  # fmt: skip
    return result
