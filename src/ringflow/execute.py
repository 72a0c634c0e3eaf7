"""One execution of a node's program on one view under one seed and variant
(docs/contracts.md#candidate).

Order of work: refuse a changed environment, prepare a private working copy, settle the
weights mode under the key lock (replay, or train while holding it), run the program in the
sandbox under the supervisor, register trained weights, write result.json. A failing
candidate is a recorded status here, never an exception.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from . import sandbox
from .candidate import train_seed_args, weights_dirs
from .carryover.checkpoint import keep_grace_checkpoint
from .cluster.jobs import current_job_id, record_job
from .core import diskspace, statuses
from .core.clock import deadline_for, load_node, load_ring, view_limits
from .core.disguise import BLIND_COPIES, alias
from .core.errors import (
    AcceptanceError,
    DeadlineReached,
    MachineryError,
    ReplayCheckFailed,
    RingflowError,
    SandboxError,
)
from .core.hashing import PROGRESS_FILE, HashMemo, drop_ignored
from .core.interrupts import relayed_since
from .core.jsonio import read_json
from .core.layout import RingLayout, is_guard_variant
from .core.ledger import Ledger, emit_event, ledger_anchor
from .core.node_state import ExecutionResult, Node, starting_record, write_result
from .core.safetree import remove_tree
from .core.settings import RingConfig
from .core.state import Ring
from .core.stop import refuse_if_stopped, stop_file, stop_ring
from .ring.boxes import close_box, open_box
from .ring.inputs import check_inputs, program_inputs
from .ring.run_inputs import fresh_inputs
from .sandbox.gpus import Allocation, allocate, default_lock_dir, device_nodes, machine_gpus
from .supervisor import HealthSettings, ResourceLimits, held_signals, supervise
from .supervisor.memory import private_tmp_mb
from .supervisor.output_limits import over_limits
from .task import command_argv
from .weights import keys
from .weights.attempts import KeyFailed, TrainAttempts
from .weights.environment import program_variables
from .weights.store import WeightsStore
from .workcopy import link_tree, reset_dir, submission_files, unshare_files

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


class DiskFull(Exception):
    """A filesystem of the execution (labelled as in `_disk_areas`) ran full."""

    def __init__(self, label: str):
        super().__init__(label)
        self.label = label


def check_environment(ring: Ring) -> None:
    keys.check_environment(ring, HashMemo(Path(ring.store) / "cache" / "hashmemo.json"))


@dataclass
class Execution:
    """Everything one execution needs, resolved once."""

    ring: Ring
    layout: RingLayout
    node: Node
    view: str
    variant: str
    spec: dict
    dir: Path
    deadline: object
    attempts: TrainAttempts | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.node, Node):
            self.node = Node.from_record(self.node)

    @property
    def config(self) -> RingConfig:
        return self.ring.config

    @property
    def blind(self) -> bool:
        return self.variant in BLIND_COPIES

    box: Path | None = None  # runs/.boxes/<random>: this run's neutral folders
    box_fd: int | None = None  # holds the box's flock while the run lives
    gpus_wanted: int = 0
    gpus: Allocation | None = None

    @property
    def work(self) -> Path:
        assert self.box is not None
        return self.box / "solution"

    @property
    def box_output(self) -> Path:
        assert self.box is not None
        return self.box / "output"

    def should_stop(self) -> str | None:
        """Why a wait (for the weights lock, a GPU) gives up: a signal the step holds
        (supervisor/held_signals.py), or the ring's deadline."""
        if (held := held_signals.pending()) is not None:
            return f"received {signal.Signals(held).name}"
        return "deadline passed" if self.deadline() <= time.time() else None


def _stopped_by_held_signal(result: dict, waiting: str) -> bool:
    """Record a signal that came before the program started as what stopped the run: an
    interruption, which runs again, never a budget cut."""
    if (held := held_signals.pending()) is None:
        return False
    name = signal.Signals(held).name
    result.update(status=statuses.INTERRUPTED, budget_cut=False,
                  reason=f"received {name} {waiting}",
                  events=[{"event": "signal", "signal": name, "at": time.time()}])  # fmt: skip
    return True


def _load(ring_dir, node_id: str, view: str, variant: str, gpus: int = 0) -> Execution:
    refuse_if_stopped(ring_dir)
    ring = load_ring(ring_dir)
    try:
        check_environment(ring)
    except RingflowError as exc:
        # The machine no longer has the environment the ring was locked with.
        raise stop_ring(ring.ring_dir, str(exc), cause="environment") from None
    layout = RingLayout(Path(ring.ring_dir))
    node = load_node(ring, node_id)
    if node.status == statuses.CARRIED_OVER:
        raise RingflowError(f"node {node_id} was carried over (sealed in nodes/{node_id}/"
                            "carryover/): a ring that continues this one resumes it")  # fmt: skip
    if node.status != statuses.READY:
        raise RingflowError(f"node {node_id} was rejected at import: {node.error}")
    spec = node.spec(view, variant)
    if spec is None:
        raise RingflowError(f"node {node_id} has no execution {view}/{variant}")
    folder = layout.exec_dir(node_id, view, variant)
    folder.mkdir(parents=True, exist_ok=True)
    spec = keys.spec_given_gpus(ring, spec, _gpu_env(gpus))
    ex = Execution(ring, layout, node, view, variant, spec, folder,
                   deadline_for(ring, view, variant))  # fmt: skip
    ex.gpus_wanted = gpus
    return ex


def _gpu_env(gpus: int) -> dict[str, str]:
    """The GPUs whose models enter the key: the job's allocation under SLURM, else every
    GPU of this machine (the one it will get is known only once it is free)."""
    if not gpus:
        return {}
    if "SLURM_JOB_ID" in os.environ and "CUDA_VISIBLE_DEVICES" in os.environ:
        return {"CUDA_VISIBLE_DEVICES": os.environ["CUDA_VISIBLE_DEVICES"]}
    return {"CUDA_VISIBLE_DEVICES": ",".join(gpu.uuid for gpu in machine_gpus())}


def _new_result(ex: Execution) -> dict:
    return {
        **starting_record(ex.node.id, ex.view, ex.variant, ex.spec, time.time()),
        # Under SLURM, the job it ran in (docs/slurm.md#job-ids-signals-and-kills).
        **({"slurm_job_id": job} if (job := current_job_id()) else {}),
    }


def run_execution(
    ring_dir: str | Path, node_id: str, view: str, variant: str, gpus: int = 0
) -> ExecutionResult:
    ex = _load(ring_dir, node_id, view, variant, gpus)
    record_job(ex.layout.root, node_id, view, variant)
    result = _new_result(ex)
    if ex.should_stop():
        if not _stopped_by_held_signal(result, "before it started"):
            result.update(budget_cut=True, reason="not started: the deadline had passed")
        return _finish(ex, result)
    inputs = program_inputs(ex.ring, view, variant)
    _check_view(ex, inputs, "before the run")
    try:
        ex.box = _make_box(ex)
        return _run_in_box(ex, result, inputs)
    except DiskFull as full:
        raise _stop_disk_full(ex, full.label) from None
    except OSError as exc:
        if not diskspace.is_full_error(exc):
            raise
        raise _stop_disk_full(ex, _full_area(ex, exc.filename)) from None
    finally:
        close_box(ex.box, ex.box_fd)


def _disk_areas(ex: Execution) -> dict[str, Path]:
    """The folders an execution writes to, by the label a disk-full stop names them with;
    the program's output first (when a program fills a disk, its output is the cause)."""
    root = ex.layout.root
    areas = {}
    if ex.box is not None:
        areas[f"the program's output ({ex.layout.boxes}/)"] = ex.box
    areas[f"{root}/"] = root
    areas[f"{Path(ex.ring.store).name}/"] = Path(ex.ring.store)
    return areas


def _full_area(ex: Execution, path: str | None) -> str:
    areas = _disk_areas(ex)
    return diskspace.area_of(path, areas) or diskspace.nearly_full(areas) or f"{ex.layout.root}/"


def _stop_disk_full(ex: Execution, label: str) -> MachineryError:
    """Stop the ring for a full disk: the machine's failure, never the candidate's. The room
    is measured before this execution's box is removed (which frees room for the record)."""
    areas = _disk_areas(ex)
    where = f"{ex.node.id} {ex.view}/{ex.variant}"
    reason = (f"{diskspace.full_message(label, areas.get(label, ex.layout.root))} (while "
              f"running {where}); free room there, then delete STOPPED.json")  # fmt: skip
    if ex.box is not None:
        remove_tree(ex.box, ignore_errors=True)
    try:
        return stop_ring(ex.layout.root, reason, node=ex.node.id, disk_full=label)
    except OSError as exc:
        # Too full even for the stop record: the job's log and exit status still say why.
        print(f"ringflow: the ring {ex.layout.root} stopped: {reason} "
              f"(STOPPED.json could not be written: {exc})", file=sys.stderr)  # fmt: skip
        return MachineryError(f"the ring stopped: {reason}")


def _make_box(ex: Execution) -> Path:
    """A folder with a random name for this run's working copy and output.

    Programs see their folders under /ringflow; the host paths behind those binds show in
    the mount table, so they name neither the node, the view nor the kind of run.
    """
    box, ex.box_fd = open_box(ex.layout.root)
    ex.box = box  # removed by run_execution however the rest goes
    link_tree(ex.layout.submission(ex.node.id), box / "solution")
    drop_ignored(box / "solution", ex.ring.tree_ignore or [])
    (box / "output").mkdir()
    return box


def _check_view(ex: Execution, inputs: Path, when: str) -> None:
    """The data a program reads is the data hashed at lock time (docs/contracts.md#sandbox), or the
    ring stops."""
    if ex.blind:
        return  # a disguised copy is ringflow's own, made from the checked snapshot
    manifest = ex.ring.views[ex.view]
    problem = check_inputs(inputs, manifest.inputs_files)
    if problem is not None:
        raise stop_ring(
            ex.layout.root,
            f"view {ex.view} changed under the locked ring ({problem}, noticed {when}); "
            "start a new ring_id to use the changed data",
            cause="data",
            view=ex.view,
        )


def _run_in_box(ex: Execution, result: dict, inputs: Path) -> dict:
    node_id, view, variant = ex.node.id, ex.view, ex.variant
    store = WeightsStore(ex.ring.store)
    with ExitStack() as lock:
        try:
            mode, method = _settle_weights(ex, store, lock)
        except KeyFailed as exc:
            result.update(status=statuses.SKIPPED, reason=str(exc))
            return _finish(ex, result)
        except DeadlineReached as exc:
            if not _stopped_by_held_signal(result, "while it waited for the weights lock"):
                result.update(budget_cut=True,
                              reason=f"gave up waiting for the weights lock: {exc}")  # fmt: skip
            return _finish(ex, result)
        except ReplayCheckFailed as exc:
            # Never a silent retrain: the run stops here and says which file
            # (docs/contracts.md#weights).
            result.update(weights_mode=statuses.REPLAY, reason=f"replay check failed: {exc}")
            emit_event(ex.layout.root, "replay_check_failed", node=node_id, view=view,
                       variant=variant, file=exc.path, reason=exc.reason)  # fmt: skip
            return _finish(ex, result)
        except OSError as exc:
            if diskspace.is_full_error(exc):
                raise DiskFull(_full_area(ex, exc.filename)) from None
            # An unreadable or full store is the machine's failure, not the candidate's.
            why = f"the weights store {ex.ring.store} failed for {node_id} {view}/{variant}"
            raise stop_ring(ex.layout.root, f"{why}: {exc}", node=node_id) from None
        result.update(weights_mode=mode, replay_method=method)
        try:
            training = mode in (statuses.TRAIN, statuses.FRESH)
            with ExitStack() as held:
                if ex.gpus_wanted:
                    ex.gpus = _take_gpus(ex, held)
                    result["gpus"] = [gpu.to_dict() for gpu in ex.gpus.gpus]
                result.update(_run_program(ex, inputs, training=training))
            if result["status"] == statuses.CRASH and (full := _disk_fault(ex, result)):
                # A program that fails on a full disk failed for the machine's sake.
                raise DiskFull(full)
        except DeadlineReached as exc:
            if not _stopped_by_held_signal(result, "while it waited for a GPU"):
                result.update(budget_cut=True, reason=f"gave up waiting for a GPU: {exc}")
            return _finish(ex, result)
        except SandboxError as exc:
            # The machine's failure, never the candidate's
            # (docs/operations.md#recovery-after-a-stop).
            raise stop_ring(ex.layout.root, f"the sandbox could not run {node_id} {view}/"
                            f"{variant}: {exc}", node=node_id) from None  # fmt: skip
        finally:
            # A replay's hard links to store objects never outlive the execution.
            store.release_links(ex.work)
        _check_view(ex, inputs, "after the run")
        _drop_output_over_limits(ex, result)
        os.replace(ex.box_output, reset_dir(ex.dir / "output"))
        # A seed-0 run cut by the cutoff keeps its grace checkpoint for the seal
        # (docs/operations.md#carryover).
        weights = weights_dirs(ex.node.solution["per_view_paths"])
        so_far = ExecutionResult.from_record(result)
        keep_grace_checkpoint(ex.ring, view, variant, so_far, ex.work, weights, ex.dir)
        registered = False
        if mode == statuses.TRAIN and result["status"] == statuses.OK:
            registered = _register(ex, store, result)
        if mode == statuses.TRAIN:
            ex.attempts.ended("registered" if registered else result["status"])
    return _finish(ex, result)


def _drop_output_over_limits(ex: Execution, result: dict) -> None:
    """Nothing past limits.output_files or limits.output_gb is kept: a run over either
    keeps an empty output, and crashes with the reason if it had not already."""
    limits = view_limits(ex.ring, ex.view)
    max_gb = limits.get("output_gb")
    over = over_limits([ex.box_output], limits.get("output_files"),
                       None if max_gb is None else int(max_gb * 1024**3))  # fmt: skip
    if over is None:
        return
    reset_dir(ex.box_output)
    if result["status"] == statuses.OK:
        result.update(status=statuses.CRASH, reason=over)
    result["output_dropped"] = over


def _settle_weights(ex: Execution, store: WeightsStore, lock: ExitStack):
    """(weights mode, replay method); a training keeps the key lock held on `lock`."""
    if ex.spec["weights"] == "none":
        return statuses.NONE, None
    if ex.spec["weights"] == "fresh":
        return statuses.FRESH, None
    key = ex.spec["key"]
    ex.attempts = TrainAttempts(ex.layout.root, key, f"{ex.node.id}/{ex.view}/{ex.variant}",
                                ex.config.max_train_attempts)  # fmt: skip
    if store.replay_entry(ex.node.tree_hash, key) is None:
        ex.attempts.check()  # a failed key frees the slot without waiting
    lock.enter_context(store.key_lock(key, should_stop=ex.should_stop))
    entry = store.replay_entry(ex.node.tree_hash, key)
    if entry is not None:
        # The guard decides what reaches final/: its replays are hashed whatever the mode.
        verify = "full" if is_guard_variant(ex.variant) else ex.config.replay_verify
        method = store.replay_into(entry, ex.work, verify=verify)
        lock.close()
        return statuses.REPLAY, method
    ex.attempts.check()
    ex.attempts.started()
    # Runs before the key lock is released, so no other attempt of the key follows ours.
    lock.push(_withdraw_if_disk_full(ex.attempts))
    store.make_private(ex.work, ex.node.solution["per_view_paths"])
    return statuses.TRAIN, None


def _withdraw_if_disk_full(attempts: TrainAttempts):
    """An exit callback: a training ended by a full disk never spends an attempt."""

    def on_exit(kind, exc, _tb) -> bool:
        if isinstance(exc, DiskFull) or (exc is not None and diskspace.is_full_error(exc)):
            attempts.withdraw()
        return False

    return on_exit


def _disk_fault(ex: Execution, result: dict) -> str | None:
    """The full area a crashed program met: noted by its supervisor while it ran, full now,
    or full for another execution of the ring meanwhile (which stopped the ring)."""
    areas = _disk_areas(ex)
    for event in result.get("events") or []:
        if event.get("event") == "disk_full":
            return diskspace.area_of(event.get("path"), areas) or f"{ex.layout.root}/"
    if full := diskspace.nearly_full(areas):
        return full
    stopped = stop_file(ex.layout.root)
    if stopped.exists():
        with contextlib.suppress(OSError, ValueError):
            return read_json(stopped).get("disk_full")
    return None


def _program_env(ex: Execution) -> dict[str, str]:
    """The program's environment, from an allow-list: nothing of ringflow's own passes.

    PATH names the program's environment and the system folders; every path the program
    is given is one it sees (docs/contracts.md#sandbox)."""
    env = {
        # The keyed ones (PATH, locale, time zone) exactly as the weights key has them.
        **program_variables(keys.ring_program_python(ex.ring), ex.config.sandbox.env_pass),
        "PYTHONDONTWRITEBYTECODE": "1",
        # Every run sees an alias, so a view-blind run looks like any other.
        "RINGFLOW_VIEW": alias(ex.ring, ex.view, BLIND_COPIES.get(ex.variant, "real")),
        "RINGFLOW_SEED": str(ex.spec["seed"]),
        "RINGFLOW_TRAIN_SEED": str(ex.spec.get("train_seed", ex.spec["seed"])),
        **thread_env(view_limits(ex.ring, ex.view)["threads"]),
    }
    if ex.gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ex.gpus.visible_devices
    for name in ex.config.sandbox.env_pass:
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def _hidden_paths(ring: Ring) -> tuple[Path, ...]:
    """Never visible, even where a system folder or a declared mount would show them."""
    ring_dir = Path(ring.ring_dir)
    return (ring_dir.parent, Path(ring.task.dir), Path(ring.store))


def _sandbox_request(ex: Execution, inputs: Path, writable: tuple[Path, ...]):
    box, limits = ex.config.sandbox, view_limits(ex.ring, ex.view)
    return sandbox.SandboxRequest(
        solution_dir=ex.work,
        input_dir=inputs,
        output_dir=ex.box_output,
        progress_file=ex.work / PROGRESS_FILE,
        writable_dirs=writable,
        environment_dirs=ex.ring.program.bound_dirs,
        mounts=tuple(Path(m) for m in box.mounts),
        hidden_paths=_hidden_paths(ex.ring),
        network=box.network,
        uid=box.uid,
        gid=box.gid,
        host_uids=box.host_uids,
        tmp_mb=private_tmp_mb(box, limits),
        gpu_devices=tuple(device_nodes(ex.gpus.gpus)) if ex.gpus else (),
        max_processes=limits["max_processes"],
        max_file_bytes=int(limits["output_gb"] * 1024**3),
    )


def _run_program(ex: Execution, inputs: Path, training: bool) -> dict:
    health_dir = reset_dir(ex.dir / "health")
    # Every run reads a fresh copy of its inputs, made alike for real and view-blind runs.
    real = ex.ring.views[ex.view].snapshot
    shutil.rmtree(ex.box / "inputs", ignore_errors=True)
    inputs = fresh_inputs(inputs, ex.box / "inputs", real)
    weights_rel = weights_dirs(ex.node.solution["per_view_paths"])
    writable = tuple(ex.work / d for d in weights_rel) if training else ()
    for folder in writable:
        folder.mkdir(parents=True, exist_ok=True)
        unshare_files(folder)
    command = " ".join(ex.node.solution["command"])
    argv = command_argv(command, python=ex.ring.program.python)
    argv += ["--seed", str(ex.spec["seed"]), *(["--ablate"] if ex.spec["ablate"] else [])]
    argv += train_seed_args(ex.node.solution, ex.spec)
    info = _sandbox_info(ex)
    plan = sandbox.plan(_sandbox_request(ex, inputs, writable), argv, _program_env(ex), info,
                        weights_rel[0] if weights_rel else None)  # fmt: skip
    try:
        outcome = supervise(
            plan.argv,
            cwd=plan.cwd,
            env=plan.env,
            stdout_path=ex.dir / "stdout.log",
            stderr_path=ex.dir / "stderr.log",
            health_dir=health_dir,
            settings=HealthSettings.from_config(ex.config.exec_health),
            limits=ResourceLimits.from_mapping(view_limits(ex.ring, ex.view)),
            deadline=ex.deadline,
            watch_output=[ex.box_output],
            watch_writable=list(writable),
            progress_file=ex.work / PROGRESS_FILE,
            wrappers=plan.wrappers,
            gpu_ids=[gpu.index for gpu in ex.gpus.gpus] if ex.gpus else None,
            pass_fds=plan.pass_fds,
            spawn_setup=plan.spawn_setup,
            mark_environment=plan.mode == "none",
            # A sandbox binds GPU devices only for an allocation: without one the program
            # can reach no GPU, and there is nothing to watch.
            gpus_unreachable=None
            if ex.gpus or plan.mode == "none"
            else "no GPU was given to this execution",
        )
        if outcome.start_failed:
            raise SandboxError(outcome.reason)
        # A tree the supervisor stopped (a signal to the step, the deadline) may have been
        # stopped before bubblewrap started the program: an interruption, not a set-up fault
        # (docs/faults.md#a-sandbox-that-does-not-start).
        ended = outcome.exit_code is not None or outcome.signal is not None
        if ended and outcome.status != statuses.INTERRUPTED:
            try:
                plan.confirm_started()
            except SandboxError as exc:
                # bubblewrap says why on the program's stderr: no program ran to write there.
                said = (ex.dir / "stderr.log").read_text(errors="replace").strip().splitlines()
                how = (f"exit code {outcome.exit_code}" if outcome.exit_code is not None
                       else f"signal {outcome.signal}")  # fmt: skip
                message = said[-1] if said else "no message"
                raise SandboxError(f"{exc}: {message} (bubblewrap ended with {how})") from None
    finally:
        plan.finish()
    record = outcome.to_dict()
    return {
        **{k: record[k] for k in OUTCOME_FIELDS},
        "health": {"jsonl": record["health_jsonl"], "latest": record["health_latest"]},
        "sandbox": {
            "mode": plan.mode,
            "network_isolated": plan.network_isolated,
            "notes": plan.notes,
            **plan.isolation,
        },
    }


def run_program(ex: Execution, inputs: Path, training: bool) -> dict:
    """The program of `ex` once, in its box (`ex.box`: solution/ and output/), sandboxed and
    supervised like any execution, its logs in `ex.dir`; no weights store, no result.json
    (a background evaluation of an engineer's workspace)."""
    return _run_program(ex, inputs, training)


def _take_gpus(ex: Execution, held: ExitStack) -> Allocation:
    return allocate(ex.gpus_wanted, default_lock_dir(), held, should_stop=ex.should_stop)


def _sandbox_info(ex: Execution) -> dict:
    if ex.config.sandbox.mode == "none":
        return {"mode": "none"}
    info = sandbox.require_sandbox(ex.config.sandbox, cache_dir=ex.layout.probes)
    if info["mode"] != ex.ring.sandbox.mode:
        raise SandboxError(
            f"the ring was locked with sandbox mode {ex.ring.sandbox.mode} but this job "
            f"gets {info['mode']} (a job run as another user?)"
        )
    return info


def _register(ex: Execution, store: WeightsStore, result: dict) -> bool:
    """Register a training run's weights; True when the key is registered afterwards."""
    if result["reap_left"]:
        # A tree that could not be fully stopped may still be writing
        # (docs/operations.md#health-supervision).
        result["reason"] = "weights not registered: processes were left after the stop"
        return False
    node, key = ex.node, ex.spec["key"]
    who = {"ring": ex.ring.ring_id, "node": node.id, "execution": f"{ex.view}/{ex.variant}"}
    limit = int(ex.config.max_weights_gb * 1024**3)
    paths = node.solution["per_view_paths"]
    supplied = submission_files(ex.layout.submission(node.id))
    try:
        entry, created = store.register(node.tree_hash, key, ex.work, paths, who, limit,
                                        supplied)  # fmt: skip
    except OSError as exc:
        if diskspace.is_full_error(exc):
            raise DiskFull(f"{Path(ex.ring.store).name}/") from None
        raise
    except AcceptanceError as exc:
        result.update(status=statuses.CRASH, reason=f"weights not accepted: {exc}")
        return False
    if created:
        files = [{"path": f["path"], "sha256": f["sha256"]} for f in entry["files"]]
        Ledger(ex.layout.ledger).append(
            "weights_registered", key=key, tree=node.tree_hash, node=node.id,
            view=ex.view, variant=ex.variant, files=files,
        )  # fmt: skip
    return True


def _finish(ex: Execution, record: dict) -> ExecutionResult:
    record["ended_at"] = time.time()
    # The relay's SIGTERM is how the run was told; its ring's stop is why.
    stopped = record.get("status") == statuses.INTERRUPTED and not record.get("budget_cut")
    if stopped and (driver := relayed_since(ex.layout.root, record["started_at"])):
        record["reason"] = f"its ring was stopped ({driver} to the driver); {record['reason']}"
    record["ledger_head"] = ledger_anchor(ex.layout.ledger)
    path = ex.dir / "result.json"
    result = ExecutionResult.from_record(record, source=path)
    write_result(ex.layout.root, path, result)
    emit_event(ex.layout.root, "execution_finished", node=result.node, view=result.view,
               variant=result.variant, status=result.status,
               budget_cut=result.budget_cut, weights_mode=result.weights_mode)  # fmt: skip
    return result
