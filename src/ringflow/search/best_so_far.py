"""Best so far, measured the same way in native and blind rings (docs/contracts.md#engineer).

While an engineer session runs, every `search.background_eval_min` ringflow looks at its
workspace. When it holds a runnable program whose tree hash (`tree_ignore` honoured)
differs from the last one evaluated, and a free execution slot exists, the program is
executed once on the proxy view (the first search view, seed 0) in the same sandbox and
under the same supervisor as any execution, niced to 19, then validated and scored by the
task's evaluator. The result goes to `nodes/<id>/best_so_far.jsonl` (time since the ring
started, tree hash, score or reason) and nowhere else: no session ever sees it, nothing
selects on it, and it is no score query. A background evaluation is stopped at the
session's end (its deadline, the hand-over point, at the latest); a failure is recorded
in that file and never changes the node.

The report's best-so-far curve (`curve`) joins these records with every node's seed-0
score on the proxy view.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

from filelock import FileLock

from ..candidate import copy_submission, runnable_problem, workspace_limits
from ..core import statuses
from ..core.clock import view_limits
from ..core.errors import DeadlineReached, RingflowError
from ..core.hashing import drop_ignored, solution_tree_hash
from ..core.jsonio import append_jsonl, read_json
from ..core.layout import RingLayout
from ..core.node_state import Node, result_if_any
from ..core.safetree import remove_tree
from ..core.state import Ring
from ..execute import Execution, run_program
from ..ring.boxes import close_box, open_box
from ..ring.inputs import program_inputs
from ..sandbox.gpus import allocate, default_lock_dir
from ..scoring import evaluate_predictions
from ..selection.timekeeper import slots_for
from ..workcopy import make_readonly_tree

NICE = 19
# A background evaluation keeps no checkpoint: its stop needs no more grace than this.
GRACE_S = 1.0
# What a tick did: evaluated the program, or why it did not.
EVALUATE, UNCHANGED, NOT_RUNNABLE, NO_SLOT = "evaluate", "unchanged", "not_runnable", "no_slot"


# ---- the decision, pure ----------------------------------------------------------------


def decide(current_hash: str | None, last_hash: str | None, free_slots: int) -> str:
    """What one tick does: nothing without a runnable program or when its tree hash is the
    one evaluated last; skip when no execution slot is free; otherwise evaluate."""
    if current_hash is None:
        return NOT_RUNNABLE
    if current_hash == last_hash:
        return UNCHANGED
    if free_slots <= 0:
        return NO_SLOT
    return EVALUATE


def interval_s(ring: Ring) -> float:
    """`search.background_eval_min` in seconds; 0 turns background evaluations off."""
    minutes = ring.config.search.background_eval_min
    return float(minutes) * 60.0


def record_path(layout: RingLayout, node: str) -> Path:
    return layout.node_dir(node) / "best_so_far.jsonl"


def records(layout: RingLayout, node: str) -> list[dict]:
    """A node's background evaluations; a line being appended right now is left out."""
    path = record_path(layout, node)
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            rows.append(json.loads(line))
    return [r for r in rows if isinstance(r, dict)]


# ---- free execution slots ----------------------------------------------------------------


def _markers(layout: RingLayout) -> Path:
    return layout.root / "search" / "background"


def executions_in_flight(layout: RingLayout) -> int:
    """Executions running now: health sampled, no result yet (as `ringflow status` counts)."""
    running = 0
    for *_, folder in layout.executions():
        if (folder / "health" / "health_latest.json").exists():
            running += not (folder / "result.json").exists()
    return running


def _held(path: Path) -> bool:
    """Whether some process holds the marker's lock (a background evaluation running)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops a lock this check took
    return False


def background_in_flight(layout: RingLayout) -> int:
    folder = _markers(layout)
    if not folder.is_dir():
        return 0
    return sum(_held(path) for path in folder.glob("*.running"))


def free_slots(ring: Ring, layout: RingLayout) -> int:
    """Execution slots the scheduler gives (slots.json), less the executions and background
    evaluations in flight. Engineer sessions are not executions and are not counted."""
    slots_file = layout.slots
    info = read_json(slots_file) if slots_file.exists() else None
    slots = slots_for(info, view_limits(ring, ring.search_views[0])["threads"])
    return slots - executions_in_flight(layout) - background_in_flight(layout)


@contextlib.contextmanager
def slot_taken(ring: Ring, layout: RingLayout, node: str) -> Iterator[bool]:
    """Take a free slot for this node's evaluation (True), or find none (False). The
    count and the marker are taken under one lock, so two sessions cannot both take the
    last free slot."""
    folder = _markers(layout)
    folder.mkdir(parents=True, exist_ok=True)
    marker = folder / f"{node}.running"
    with FileLock(str(folder / ".slots.lock")):
        if free_slots(ring, layout) <= 0:
            taken = None
        else:
            taken = os.open(marker, os.O_WRONLY | os.O_CREAT, 0o644)
            fcntl.flock(taken, fcntl.LOCK_EX)
    if taken is None:
        yield False
        return
    try:
        yield True
    finally:
        os.close(taken)


def lower_priority() -> None:
    """Nice 19 for the calling thread and every process it starts from now on (the
    program, the validator, the scorer): Linux keeps a nice value per thread, and a child
    inherits its forking thread's."""
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)


# ---- one session's background evaluations ------------------------------------------------


def workspace_hash(ring: Ring, workspace: Path) -> str | None:
    """The tree hash the workspace would be submitted with, or None when it holds no
    runnable program (or is being rewritten under our feet)."""
    max_bytes = int(ring.config.max_weights_gb * 1024**3)
    try:
        solution, _ = runnable_problem(workspace, max_bytes)
        if solution is None:
            return None
        tree, _ = solution_tree_hash(workspace, set(solution.per_view_paths),
                                     ring.tree_ignore or [])  # fmt: skip
    except (OSError, RingflowError):
        return None
    return tree


class BackgroundEvaluator:
    """Ticks beside one engineer session; `stop()` when the session has ended."""

    def __init__(self, ring: Ring, layout: RingLayout, node: Node | dict, workspace: Path,
                 deadline: Callable[[], float]):  # fmt: skip
        self.ring, self.layout = ring, layout
        self.node = node if isinstance(node, Node) else Node.from_record(node)
        self.workspace = workspace
        self.session_deadline = deadline
        self.every_s = interval_s(ring)
        self.view = ring.search_views[0]
        self.ended = threading.Event()
        self.ended_at = 0.0
        # The workspace as handed to the session (the parent's submission, the template)
        # is not the engineer's work: only a change from it is evaluated.
        self.last_hash = workspace_hash(ring, workspace)
        self.count = 0
        self._thread: threading.Thread | None = None

    def start(self) -> BackgroundEvaluator:
        if self.every_s > 0:
            self._thread = threading.Thread(target=self._loop, daemon=True,
                                            name=f"best-so-far-{self.node.id}")  # fmt: skip
            self._thread.start()
        return self

    def end(self) -> None:
        """The session has ended: an evaluation in flight is cut from now on."""
        self.ended_at = time.time()
        self.ended.set()

    def stop(self) -> None:
        """End, and wait until an evaluation in flight is cut and recorded."""
        self.end()
        if self._thread is not None:
            self._thread.join()

    def deadline(self) -> float:
        """The session's deadline, or when it ended once it has."""
        return self.ended_at if self.ended.is_set() else self.session_deadline()

    def _loop(self) -> None:
        lower_priority()
        while not self.ended.wait(self.every_s):
            if time.time() >= self.session_deadline():
                return
            try:
                self.tick()
            except Exception as exc:  # never the session's failure, never the node's
                self._append({"status": "failed", "reason": f"{type(exc).__name__}: {exc}"})

    def tick(self) -> str:
        """One look at the workspace; returns what it did (see `decide`)."""
        current = workspace_hash(self.ring, self.workspace)
        changed = current is not None and current != self.last_hash
        action = decide(
            current, self.last_hash, free_slots(self.ring, self.layout) if changed else 0
        )
        if action == EVALUATE:
            # Taken under the slots lock: another session may have taken the last one since.
            with slot_taken(self.ring, self.layout, self.node.id) as free:
                if free:
                    self.last_hash = current  # evaluated once, however it ends
                    self.evaluate()
                    return EVALUATE
            action = NO_SLOT
        if action == NO_SLOT:
            self._append({"status": "skipped", "tree_hash": current,
                          "reason": "no free execution slot"})  # fmt: skip
        return action

    def _append(self, row: dict) -> None:
        now = time.time()
        append_jsonl(record_path(self.layout, self.node.id),
                     {"at": now, "t": now - self.ring.start, **row})  # fmt: skip

    def evaluate(self) -> dict:
        """Snapshot the workspace, run it on the proxy view, score it, record the result."""
        self.count += 1
        folder = self.layout.node_dir(self.node.id) / "best_so_far" / str(self.count)
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        box, held = open_box(self.layout.root)
        started = time.time()
        try:
            row = self._evaluate_in_box(box, folder)
        except Exception as exc:  # recorded; never the session's failure, never the node's
            row = {"status": "failed", "score": None, "valid": False,
                   "reason": f"{type(exc).__name__}: {exc}"}  # fmt: skip
        finally:
            close_box(box, held)
            remove_tree(folder / "output", ignore_errors=True)
        row.update(eval=self.count, wall_s=round(time.time() - started, 3), nice=NICE)
        self._append(row)
        return row

    def _evaluate_in_box(self, box: Path, folder: Path) -> dict:
        max_bytes = int(self.ring.config.max_weights_gb * 1024**3)
        solution, problem = runnable_problem(self.workspace, max_bytes, workspace_limits(self.ring))
        if solution is None:
            return {"status": "not_runnable", "reason": problem}
        copy_submission(solution, box / "solution")
        make_readonly_tree(box / "solution")
        tree, _ = solution_tree_hash(box / "solution", set(solution.per_view_paths),
                                     self.ring.tree_ignore or [])  # fmt: skip
        self.last_hash = tree
        drop_ignored(box / "solution", self.ring.tree_ignore or [])
        (box / "output").mkdir()
        seed = 0
        spec = {"seed": seed, "ablate": False, "key": None,
                "weights": "fresh" if solution.has_weights else "none",
                "train_seed": solution.training_seed(seed)}  # fmt: skip
        node = replace(self.node, solution=solution.to_dict(), tree_hash=tree)
        health = self.ring.config.exec_health
        health = replace(health, term_grace_s=min(health.term_grace_s, GRACE_S))
        ring = replace(self.ring, config=replace(self.ring.config, exec_health=health))
        ex = Execution(ring, self.layout, node, self.view, "s0", spec, folder, self.deadline,
                       box=box)  # fmt: skip
        row = {"tree_hash": tree, "view": self.view, "seed": seed}
        with ExitStack() as held:
            gpus = self._gpus_wanted()
            if gpus:
                ex.gpus_wanted = gpus
                try:
                    ex.gpus = allocate(gpus, default_lock_dir(), held,
                                       should_stop=lambda: "no GPU is free now")  # fmt: skip
                except DeadlineReached:
                    return {**row, "status": "skipped", "reason": "no free GPU"}
            outcome = run_program(ex, program_inputs(self.ring, self.view, "s0"),
                                  training=solution.has_weights)  # fmt: skip
        row.update(run_status=outcome["status"], budget_cut=outcome["budget_cut"])
        if outcome["status"] != statuses.OK:
            status = "cut" if outcome["budget_cut"] else outcome["status"]
            return {**row, "status": status, "score": None, "valid": False,
                    "reason": outcome["reason"]}  # fmt: skip
        os.replace(box / "output", folder / "output")
        record = evaluate_predictions(self.ring, folder, self.view, seed, deadline=self.deadline)
        if record.get("budget_cut"):
            return {**row, "status": "cut", "score": None, "valid": False,
                    "reason": record.get("reason", "")}  # fmt: skip
        scored = bool(record.get("scored") and record.get("valid"))
        return {**row, "status": "scored" if scored else "invalid",
                "score": record.get("score") if scored else None, "valid": scored,
                "reason": record.get("reason", "")}  # fmt: skip

    def _gpus_wanted(self) -> int:
        """GPUs as an execution gets them, where the ring's scheduler gives GPU slots."""
        info = read_json(self.layout.slots) if self.layout.slots.exists() else {}
        return int(self.ring.config.gpus_per_execution or 0) if info.get("gpus") else 0


# ---- the ring's best-so-far curve (report and summary) -----------------------------------


def _read(path: Path) -> dict | None:
    try:
        value = read_json(path)
    except (OSError, RingflowError):
        return None
    return value if isinstance(value, dict) else None


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _seed0_point(layout: RingLayout, node: str, view: str, start: float) -> dict | None:
    """The node's seed-0 execution on the proxy view, when it has a valid score."""
    result = result_if_any(layout.result(node, view, "s0"))
    score = _read(layout.score(node, view, "s0"))
    if not (result and score and score.get("scored") and score.get("valid")):
        return None
    if not _number(score.get("score")):
        return None
    ended = result.ended_at or start
    return {"t": ended - start, "node": node, "score": float(score["score"]), "source": "execution"}


def _better(direction: str, a: float, b: float) -> bool:
    return a > b if direction == "maximize" else a < b


def ring_progress(ring: Ring, layout: RingLayout) -> dict:
    """Best valid score on the proxy view against time since the ring started, the same
    for blind and native rings: every node's seed-0 execution there (static candidates
    and engineered nodes alike, at the time it ended) and every background evaluation.

    Returns `points` (every valid result, in time order, with its `source`), `steps` (each
    point that improved the best so far), `best`, `first_valid` (the first point), and per
    node the count of background evaluations and of those scored. Files being written are
    skipped, never an error: this runs on live rings."""
    view, start = ring.search_views[0], ring.start
    direction = ring.task.direction
    points: list[dict] = []
    background: dict[str, dict] = {}
    for node_dir in sorted(layout.root.glob("nodes/*/")):
        node = node_dir.name
        executed = _seed0_point(layout, node, view, start)
        if executed is not None:
            points.append(executed)
        rows = records(layout, node)
        if not rows:
            continue
        scored = [r for r in rows if r.get("status") == "scored" and _number(r.get("score"))]
        background[node] = {
            "evaluations": sum(1 for r in rows if "eval" in r),
            "scored": len(scored),
            "skipped": sum(1 for r in rows if r.get("status") == "skipped"),
        }
        points += [
            {"t": float(r["t"]), "node": node, "score": float(r["score"]),
             "source": "background", "tree_hash": r.get("tree_hash")}
            for r in scored if _number(r.get("t"))
        ]  # fmt: skip
    points.sort(key=lambda p: (p["t"], p["node"]))
    steps: list[dict] = []
    for point in points:
        if not steps or _better(direction, point["score"], steps[-1]["score"]):
            steps.append(point)
    return {
        "view": view,
        "direction": direction,
        "points": points,
        "steps": steps,
        "best": steps[-1] if steps else None,
        "first_valid": points[0] if points else None,
        "background": background,
    }
