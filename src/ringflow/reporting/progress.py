"""What the terminal shows while a ring runs (docs/operations.md#while-a-ring-runs): ringflow's
progress, then the summary.

Snakemake's own log (every job, every rule) still goes to its log file under
`.snakemake/log/`; on the terminal only its warnings and errors remain, beside one
progress line (executions done/total, best so far, time to cutoff) whenever something
changed, and at least every `terminal.progress_s` seconds. The Snakefile's `onsuccess` and
`onerror` hooks end every ring with `ring_end`: the summary, with its failure digest.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from pathlib import Path

from ..carryover.scores import imported_score
from ..cluster.queue import pending_jobs, pending_note
from ..core import statuses
from ..core.interrupts import stopped_by_signal
from ..core.layout import RingLayout
from ..core.node_state import result_if_any
from ..core.safetext import printable
from ..core.settings import Terminal
from ..core.state import Ring
from .report import format_duration

SNAKEMAKE_LOGGER = "snakemake.logging"
HEARTBEAT_S = 300.0


class _WarningsOnly(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING


def quiet_snakemake_terminal() -> bool:
    """Keep Snakemake's terminal output to warnings and errors; its log file keeps all."""
    quieted = False
    for handler in logging.getLogger(SNAKEMAKE_LOGGER).handlers:
        if handler.name == "DefaultStreamHandler":
            handler.addFilter(_WarningsOnly())
            quieted = True
    return quieted


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return None


def snapshot(ring_root: str | Path, now: float | None = None) -> dict:
    """Counts for one progress line, from the ring's files only."""
    now = time.time() if now is None else now
    layout = RingLayout(Path(ring_root))
    # A lock not yet written (or being replaced) reads as an empty ring under its folder's name.
    record = _read(layout.ring_json)
    ring = Ring.from_record(
        {"ring_id": layout.root.name, "ring_dir": str(layout.root)}
        | (record if isinstance(record, dict) else {})
    )
    index = _read(layout.nodes_index) or {}
    views = ring.search_views
    direction = ring.task.direction or "maximize"
    known = set()
    for node in index.get("nodes", []):
        if node.get("status") != statuses.READY:
            continue
        variants = ["s0"] if node.get("role") == "baseline" else ["s0", "s0-ablate"]
        if node.get("imported"):  # scored by an earlier ring; rescored on seed 0 only
            variants = ["s0"] if node.get("rescore") else []
        known |= {(node["id"], v, var) for v in views for var in variants}
    done = running = scoring = failed = interrupted = 0
    failed_nodes: set[str] = set()
    seed0: dict[str, dict[str, float]] = {}
    for node, view, variant, exec_dir in layout.executions():
        known.add((node, view, variant))
        result = result_if_any(exec_dir / "result.json")
        if result is None:
            running += (exec_dir / "health" / "health_latest.json").exists()
            continue
        score = _read(exec_dir / "score.json")
        if score is None:  # the program has ended; its job is scoring it (score.json next)
            scoring += 1
            continue
        done += 1
        # As the failure digest counts them: a run cut by the ring's own clock has not failed.
        cut = result.budget_cut or score.get("budget_cut")
        if stopped_by_signal(result):
            interrupted += 1  # stopped with its ring: it runs again when the ring does
        elif not cut and (result.status != "ok" or (score and not score.get("valid"))):
            failed += 1
            failed_nodes.add(node)
        if variant == "s0" and view in views and score.get("scored") and score.get("valid"):
            seed0.setdefault(node, {})[view] = score["score"]
    _add_imported_scores(layout, index, ring.search_hash, views, seed0)
    means = {n: sum(s.values()) / len(views) for n, s in seed0.items() if len(s) == len(views)}
    best = None
    if means:
        pick = max if direction == "maximize" else min
        node = pick(sorted(means), key=lambda n: means[n])
        best = (node, means[node])
    cutoff = (_read(layout.cutoff) or {}).get("cutoff", ring.initial_cutoff)
    return {
        "ring_id": ring.ring_id or layout.root.name,
        "done": done,
        "total": len(known),
        "running": running,
        "scoring": scoring,
        "failed": failed,
        "interrupted": interrupted,
        "failed_nodes": len(failed_nodes),
        "best": best,
        "to_cutoff": None if cutoff is None else cutoff - now,
        "decided": layout.decision.exists(),
    }


def _add_imported_scores(layout: RingLayout, index: dict, search_hash: str | None,
                         views: list[str], seed0: dict[str, dict[str, float]]) -> None:  # fmt: skip
    """The seed-0 scores an imported node brought from an earlier ring count toward the best
    so far, as they count in the ranking: only those made under this ring's search_hash, and
    only where this ring has not run the node again."""
    for node in index.get("nodes", []):
        if node.get("status") != statuses.READY or not node.get("imported"):
            continue
        for view in views:
            if view in seed0.get(node["id"], {}):
                continue
            found = imported_score(layout, node["id"], view, "s0", search_hash or "") or {}
            if found.get("scored") and found.get("valid") and found.get("score") is not None:
                seed0.setdefault(node["id"], {})[view] = found["score"]


def progress_line(snap: dict) -> str:
    best = "none yet" if snap["best"] is None else f"{snap['best'][0]} {snap['best'][1]:.4f}"
    if snap["decided"]:
        clock = "final decision made"
    elif snap["to_cutoff"] is None:
        clock = "cutoff unknown"
    elif snap["to_cutoff"] >= 0:
        clock = f"cutoff in {format_duration(snap['to_cutoff'])}"
    else:
        clock = f"final selection (cutoff passed {format_duration(-snap['to_cutoff'])} ago)"
    nodes = snap.get("failed_nodes", 0)
    failed = (
        f", {snap['failed']} failed (across {nodes} node{'s' if nodes != 1 else ''})"
        if snap["failed"]
        else ""
    )
    stopped = snap.get("interrupted", 0)
    failed += f", {stopped} interrupted (they run again when the ring does)" if stopped else ""
    return printable(
        f"[{time.strftime('%H:%M:%S')}] ring {snap['ring_id']}: executions "
        f"{snap['done']}/{snap['total']} done, {snap['running']} running"
        f"{f', {scoring} being scored' if (scoring := snap.get('scoring')) else ''}{failed} | "
        f"best so far {best} (seed-0 mean) | {clock}"
    )


class Progress:
    """A daemon thread printing a progress line when the counts change."""

    def __init__(
        self, ring_root: str | Path, every_s: float, stream=None, pending_warn_min: float = 0
    ):
        self.ring_root = Path(ring_root)
        self.every_s = every_s
        # Under SLURM: the run's job name (set once the jobs are named) and how long a job
        # may pend before the line names it (docs/slurm.md#pending-jobs).
        self.slurm_job_name: str | None = None
        self.pending_warn_min = pending_warn_min
        self.stream = stream or sys.stdout
        self.stopped = threading.Event()
        self.last_key = None
        self.last_at = 0.0
        self.thread = threading.Thread(target=self._loop, name="ringflow-progress", daemon=True)

    def start(self) -> Progress:
        self.thread.start()
        return self

    def print_now(self, force: bool = False) -> None:
        if not RingLayout(self.ring_root).ring_json.exists():
            return
        if not force and RingLayout(self.ring_root).stop_manifest.exists():
            # A finished ring says nothing more (a chain's next ring is running); its last
            # line comes with its summary.
            self.stopped.set()
            return
        snap = snapshot(self.ring_root)
        pending = self._pending()
        key = (snap["done"], snap["total"], snap["running"], snap["scoring"], snap["best"],
               snap["decided"], pending and pending[0])  # fmt: skip
        if force or key != self.last_key or time.monotonic() - self.last_at >= HEARTBEAT_S:
            line = progress_line(snap) + (f" | {pending[1]}" if pending else "")
            print(line, file=self.stream, flush=True)
            self.last_key, self.last_at = key, time.monotonic()

    def _pending(self) -> tuple[tuple, str] | None:
        if not self.slurm_job_name or self.pending_warn_min <= 0:
            return None
        jobs = pending_jobs(self.slurm_job_name)
        return None if jobs is None else pending_note(jobs, time.time(), self.pending_warn_min)

    def _loop(self) -> None:
        while not self.stopped.wait(self.every_s):
            try:
                self.print_now()
            except Exception as exc:  # progress must never bring the ring down
                print(f"ringflow: progress: {exc}", file=sys.stderr)

    def stop(self) -> None:
        self.stopped.set()


# One progress thread per ring of the running Snakemake (a chain runs its rings in turn).
_running: dict[str, Progress] = {}


def ring_start(ring_root: str | Path, terminal: Terminal, pending_warn_min: float = 0) -> None:
    """onstart: quiet Snakemake's terminal output and start the ring's progress lines."""
    if not terminal.snakemake_log:
        quiet_snakemake_terminal()
    if terminal.progress_s > 0 and str(ring_root) not in _running:
        progress = Progress(ring_root, terminal.progress_s, pending_warn_min=pending_warn_min)
        _running[str(ring_root)] = progress.start()


def watch_slurm_queue(ring_root: str | Path, job_name: str) -> None:
    """onstart, under the SLURM executor once the jobs are named: the ring's progress line
    names the run's jobs that pend too long."""
    if (progress := _running.get(str(ring_root))) is not None:
        progress.slurm_job_name = job_name


def ring_end(
    ring_root: str | Path,
    log: str | list | None,
    completed: bool,
    ring_name: str | None = None,
) -> None:
    """onsuccess/onerror: the last progress line, the summary with its failure digest, and
    where Snakemake's own log is (log: None to leave that to a later ring); after a ring
    that did not finish, the error that stopped it and the command that continues it."""
    from ..core.recovery import advice
    from ..ring.edits import find_edits
    from .digest import key_error_line
    from .summary import render_summary

    running = _running.pop(str(ring_root), None)
    if running is not None:
        running.stop()
        running.print_now(force=True)
    root = Path(ring_root)
    logs = [log] if isinstance(log, str) else list(log or [])
    out = sys.stdout
    print("", file=out)
    if RingLayout(root).ring_json.exists():
        try:
            print(render_summary(root), file=out)
        except Exception as exc:
            print(f"ringflow: the summary could not be written: {exc}", file=out)
    for path in logs:
        print(f"Snakemake's log: {path}", file=out)
    out.flush()
    if completed:
        return
    lines = []
    # A stopped ring's advice opens with why it stopped: the first failure, where the
    # log's last error is often a later job's refusal to run in the stopped ring.
    stopped = RingLayout(root).stopped.exists()
    error = "" if stopped else next(filter(None, (key_error_line(Path(p)) for p in logs)), "")
    if error:
        lines.append(f"ringflow: the error: {error}")
    if not RingLayout(root).ring_json.exists():
        lines.append(f"ringflow: the ring {root} was not started: see the error above.")
    elif not RingLayout(root).stop_manifest.exists():
        try:
            edits = find_edits(root)
        except Exception:  # an unreadable record must not hide the advice
            edits = []
        lines += advice(root, ring_name=ring_name, edits=edits)
    print("\n".join(lines), file=sys.stderr, flush=True)
