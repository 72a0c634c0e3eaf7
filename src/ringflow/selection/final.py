"""Final selection (docs/operations.md#final-selection): baseline first, review, guard on fresh
seeds, the final pick."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path
from statistics import fmean

from .. import guardstats
from ..core import statuses
from ..core.clock import final_top_k, load_node, load_ring, stage_deadline
from ..core.errors import InputError
from ..core.hashing import listing, listing_hash
from ..core.jsonio import atomic_write_json, fsync_dir, fsync_tree, read_json, sha256_json
from ..core.layout import RingLayout
from ..core.ledger import Ledger, emit_event
from ..core.node_state import Node, read_node, read_result
from ..core.records import hash_record, write_record
from ..core.seeds import chain_rings
from ..core.state import Ring
from ..scoring import read_score, scorer_mode, usable
from ..weights.store import WeightsStore
from . import viewblind
from .deploy import complete_solution
from .gap import selection_gap
from .incumbent import INCUMBENT, reference
from .order import NOT_REVIEWED, choose, ends_selection, usable_baseline
from .scores import node_mean

REUSE_WARNING = (
    "This task has no guard view: the guard re-used the search views' rows, which also "
    "picked the finalists, so its bound covers seed and row noise but not the selection "
    "itself. Declare a guard view in task.yaml (views: {search: [...], guard: [...], "
    "final: ...}) for a pick that holds on data the search never saw."
)


def _ctx(ring_dir):
    ring = load_ring(ring_dir)
    layout = RingLayout(Path(ring.ring_dir))
    return ring, layout, read_json(layout.nodes_index)


def guard_refused(ring: Ring, index: dict) -> bool:
    return ring.config.guard.enabled and usable_baseline(index) is None


def write_final(layout: RingLayout, node: str, record: dict) -> None:
    """Replace final/ as a whole: build it beside, then swap, so it is never half-written.

    Between the two renames a crash leaves `.final.old`; the next write puts it back first,
    so a written final/ is never lost.
    """
    old = layout.root / ".final.old"
    if old.exists() and not layout.final_dir.exists():
        old.rename(layout.final_dir)
    staging = layout.root / f".final.tmp-{os.getpid()}"
    if staging.exists():
        shutil.rmtree(staging)
    shutil.copytree(layout.submission(node), staging / "solution")
    complete_solution(layout, node, staging / "solution")  # weights + MANIFEST.json
    atomic_write_json(staging / "FINAL.json", record)
    fsync_tree(staging)  # every file on disk before the swap makes it final/
    if old.exists():
        shutil.rmtree(old)
    if layout.final_dir.exists():
        layout.final_dir.rename(old)
    staging.rename(layout.final_dir)
    fsync_dir(layout.root)
    hash_record(layout.root, layout.final_dir / "FINAL.json")
    if old.exists():
        shutil.rmtree(old)


def seat_baseline(ring_dir) -> dict:
    """Write the guard's reference to final/ before any candidate is reviewed: the chain's
    incumbent in a ring that continues another, else the baseline
    (docs/guard.md#the-incumbent)."""
    ring, layout, index = _ctx(ring_dir)
    base = usable_baseline(index)
    ref = reference(ring, index)
    if guard_refused(ring, index):
        why = (
            "no baseline configured"
            if index["baseline"] is None
            else f"baseline {index['baseline']} was rejected at import"
        )
        seated = {"refused": True, "baseline": index["baseline"], "reason": why}
        emit_event(layout.root, "final_guard_refused", reason=why)
        Ledger(layout.ledger).append("final_guard_refused", reason=why)
    elif base is None:
        seated = {"refused": False, "baseline": None, "reason": "no baseline; guard disabled"}
    else:
        seat = ref["node"]
        record = {
            "decision": ref["role"],
            "chosen": seat,
            "baseline": base,
            "reference": seat,
            "guard_against": ref["role"],
            "incumbent": incumbent_record(ref),
            "reason": f"{ref['role']} seated before any candidate review; final selection "
            f"pending ({ref['reason']})",
            "baseline_search": node_mean(ring, layout, base, "s0"),
            "complete": False,
        }
        write_final(layout, seat, record)
        seated = {"refused": False, "baseline": base, "reason": f"{ref['role']} seated"}
        emit_event(layout.root, "baseline_seated", node=seat, role=ref["role"])
    seated.update(reference=ref["node"] if not seated["refused"] else None,
                  guard_against=ref["role"], reference_reason=ref["reason"],
                  incumbent=incumbent_record(ref), at=time.time())  # fmt: skip
    atomic_write_json(layout.seated, seated)
    return seated


def incumbent_record(ref: dict) -> dict | None:
    """FINAL.json's `incumbent`: the parent's choice, where it came from, whether it is the
    side guarded against here (None in a chain's first ring)."""
    choice = ref["incumbent"]
    if choice is None:
        return None
    return {
        "node": ref["node"] if ref["role"] == INCUMBENT else None,
        "parent_ring": choice["ring"],
        "parent_node": choice["node"],
        "parent_decision": choice["decision"],
        "chosen_in": choice["chosen_in"],
        "is_baseline": choice["is_baseline"],
        "kept_as_reference": ref["role"] == INCUMBENT,
        "reason": ref["reason"],
        "warning": ref["warning"],
    }


def reference_node(seated: dict) -> str | None:
    """The node final/ was seated with and finalists are guarded against (a seat written
    before the incumbent existed names the baseline only)."""
    return seated.get("reference", seated.get("baseline"))


def guard_views(ring: Ring) -> list[str]:
    """The views the guard scores: the guard views, or the search views when there are none."""
    return list(ring.guard_views or ring.search_views)


def reuses_search_rows(ring: Ring) -> bool:
    return not ring.guard_views


# Review outcomes (docs/guard.md#cut-is-not-failed).
PASSED, FAILED = "passed", "failed"
SCREEN_VARIANTS = ("s0", "blind-s0", "blind2-s0")
# The view-blind check's fresh run on the real view, compared with the further disguised
# runs (exchangeable with them, unlike s0's registered weights).
REAL_FRESH = "real-s0"


def view_blind_settings(ring: Ring) -> dict:
    settings = ring.config.view_blind
    return {"extra_runs": 8, "max_extra_train_min": 60.0,
            **(settings.to_mapping() if settings is not None else {})}  # fmt: skip


def extra_blind_variants(ring: Ring) -> list[str]:
    """The further disguised runs a flagged program gets (blind3-s0, blind4-s0, ...)."""
    return [f"blind{i}-s0" for i in range(3, 3 + view_blind_settings(ring)["extra_runs"])]


def review_variants(screen_record: dict) -> list[str]:
    """The runs the review needs after its first screen (none when the screen decided)."""
    return list(screen_record.get("extra_variants") or [])


def _blind_run(ring, layout, node: str, view: str, variant: str) -> dict:
    """One view-blind run: "ok" with its score, "cut" (time ran out: not the program's
    doing) or "failed" (it crashed or its output has no valid score)."""
    result_path = layout.result(node, view, variant)
    result = read_result(result_path) if result_path.exists() else None
    score = read_score(layout, node, view, variant)
    value = usable(score, ring.task.direction)
    run = {"variant": variant, "score": value, "wall_s": result and result.wall_s}
    reason = (score or {}).get("reason") or (result and result.reason) or ""
    if result is None and score is None:
        return {**run, "state": "cut", "reason": f"{variant} did not run"}
    cut = (result and result.budget_cut) or (score or {}).get("budget_cut")
    if cut or (result and result.status) == statuses.INTERRUPTED:
        return {**run, "state": "cut", "reason": f"{variant} was cut: {reason}".rstrip(": ")}
    if value is None:
        status = (result and result.status) or "not scored"
        return {**run, "state": "failed", "reason": f"{variant} {status}: {reason}".rstrip(": ")}
    return {**run, "state": "ok", "reason": ""}


def _runs_problem(runs: list[dict]) -> tuple[str, str] | None:
    for state, outcome in (("cut", NOT_REVIEWED), ("failed", FAILED)):
        bad = [r for r in runs if r["state"] == state]
        if bad:
            return outcome, "; ".join(r["reason"] for r in bad)
    return None


def _retrains(ring: Ring, node: Node) -> bool:
    return bool(node.solution["per_view_paths"]) or bool(ring.task.reorder_rows)


def _repeats_itself(ring, layout, node_id: str, view: str) -> bool:
    """s0 and the fresh real run wrote byte-identical output, on inputs that the disguised
    copies repeat byte for byte (the task reorders no rows)."""
    if ring.task.reorder_rows:
        return False
    real = _output_hash(layout, node_id, view, "s0")
    return real is not None and real == _output_hash(layout, node_id, view, REAL_FRESH)


def screen_check(ring_dir, node_id: str) -> dict:
    """The view-blind check's first screen (s0 against two disguised copies), and the
    further runs it needs when it flags a program whose output varies."""
    ring, layout, _ = _ctx(ring_dir)
    node = load_node(ring, node_id)
    view = ring.search_views[0]
    runs = [_blind_run(ring, layout, node_id, view, v) for v in SCREEN_VARIANTS]
    record = {"node": node_id, "view": view, "runs": runs, "extra_variants": []}
    problem = _runs_problem(runs)
    if problem is not None:
        outcome, why = problem
        record.update(outcome=outcome, cut=outcome == NOT_REVIEWED,
                      reason=f"view-blind check: {why}")  # fmt: skip
        return record
    real, first, second = (r["score"] for r in runs)
    retrains = _retrains(ring, node)
    record.update(viewblind.screen(real, first, second, retrains), real=real,
                  disguised=[first, second], retrains=retrains)  # fmt: skip
    if not record["flagged"]:
        record.update(outcome=PASSED, reason="same score on the disguised copies")
    elif not record["varies"]:
        # Its output does not vary between runs, yet the real view's differs: exact.
        record.update(outcome=FAILED, reason=(
            f"predictions depend on the view's identity: {real:.6g} on {view} vs "
            f"{first:.6g} and {second:.6g} on two disguised copies, beyond the allowed "
            f"{record['allowed']:.3g} (its output does not vary between runs)"))  # fmt: skip
    else:
        settings = view_blind_settings(ring)
        walls = [r["wall_s"] for r in runs[1:] if r["wall_s"] is not None]
        extra_min = settings["extra_runs"] * (max(walls) if walls else 0.0) / 60
        if node.solution["per_view_paths"] and extra_min > settings["max_extra_train_min"]:
            record.update(outcome=NOT_REVIEWED, reason=(
                f"view-blind check: the first screen flagged a difference, and confirming it "
                f"would take {settings['extra_runs']} more trainings (about {extra_min:.0f} "
                f"min, over view_blind.max_extra_train_min = "
                f"{settings['max_extra_train_min']:g})"))  # fmt: skip
        else:
            record.update(outcome=None, extra_variants=[REAL_FRESH, *extra_blind_variants(ring)],
                          reason="flagged by the first screen: more disguised runs")  # fmt: skip
    return record


def screen(ring_dir, node_id: str) -> dict:
    """The rule behind the review: write the screen's record (its further runs follow)."""
    _, layout, _ = _ctx(ring_dir)
    record = screen_check(ring_dir, node_id)
    atomic_write_json(layout.screen(node_id), record)
    return record


def _view_blind_check(ring, layout, node: Node) -> dict:
    """Same program, seed 0, the first search view under other names, paths and row
    orders (all fresh): does its score follow the view's identity?

    The first screen decides for programs whose output does not vary (exact equality
    within arithmetic noise) and passes those close enough; when it flags a program whose
    output varies, that program's fresh run on the real view must lie inside a prediction
    interval of all its disguised runs (an honest program fails that 0.5% of the time
    under normal noise).
    """
    path = layout.screen(node.id)
    first = read_json(path) if path.exists() else screen_check(ring.ring_dir, node.id)
    check = {"check": "view_blind", "view": first["view"], "screen": first,
             "real": first.get("real"), "disguised": first.get("disguised")}  # fmt: skip
    if first["outcome"] is not None:
        return {**check, "outcome": first["outcome"], "passed": first["outcome"] == PASSED,
                "cut": bool(first.get("cut")), "reason": first["reason"]}  # fmt: skip
    view = first["view"]
    runs = [_blind_run(ring, layout, node.id, view, v) for v in review_variants(first)]
    problem = _runs_problem(runs)
    if problem is not None:
        outcome, why = problem
        return {**check, "outcome": outcome, "passed": False, "cut": outcome == NOT_REVIEWED,
                "reason": f"view-blind check (further runs): {why}"}  # fmt: skip
    real_fresh = runs[0]["score"]
    disguised = [*first["disguised"], *(r["score"] for r in runs[1:])]
    if _repeats_itself(ring, layout, node.id, view):
        # Same input, same output: the program does not vary, so its scores on the
        # byte-identical disguised copies had to be the same (exact equality).
        return {**check, "outcome": FAILED, "passed": False, "reason": (
            f"predictions depend on the view's identity: two runs on {view} wrote identical "
            f"output (score {first['real']:.6g}), yet the disguised copies scored "
            f"{first['disguised'][0]:.6g} and {first['disguised'][1]:.6g}")}  # fmt: skip
    confirmed = viewblind.confirm(real_fresh, disguised)
    check.update(confirmation=confirmed)
    low, high = confirmed["interval"]
    if confirmed["outside"]:
        return {**check, "outcome": FAILED, "passed": False, "reason": (
            f"predictions depend on the view's identity: a fresh run on {view} scored "
            f"{real_fresh:.6g}, outside the {confirmed['level']:.1%} prediction interval "
            f"[{low:.6g}, {high:.6g}] of {len(disguised)} runs on disguised copies")}  # fmt: skip
    return {**check, "outcome": PASSED, "passed": True, "reason": (
        f"a fresh run on {view} ({real_fresh:.6g}) lies inside the prediction interval "
        f"[{low:.6g}, {high:.6g}] of {len(disguised)} disguised runs")}  # fmt: skip


def _output_until(proc: subprocess.Popen, deadline) -> str | None:
    """The process's output, or None after killing its group when `deadline()` came first
    (re-read every quarter second, so a moved deadline is followed)."""
    while True:
        try:
            return proc.communicate(timeout=0.25)[0]
        except subprocess.TimeoutExpired:
            if time.time() >= deadline():
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                return None


def _review_command(ring, layout, node_id: str) -> dict:
    """Run the review command; it stops at the review stage's live deadline
    (docs/operations.md#the-clock)."""
    command = ring.config.review
    argv = [*shlex.split(command), str(layout.node_dir(node_id))]
    started = time.time()
    limit = started + ring.config.scorer_timeout_min * 60
    try:
        proc = subprocess.Popen(
            argv,
            cwd=layout.root,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
    except OSError as exc:
        return {"check": "review_command", "passed": False, "outcome": FAILED,
                "reason": f"review failed: {exc}"}  # fmt: skip
    text = _output_until(proc, lambda: min(limit, stage_deadline(ring, "review")))
    ended = time.time()
    if text is None:
        cut = stage_deadline(ring, "review") < limit  # a deadline, not the time limit
        if cut:
            why = "review command cut: the review stage's deadline came first"
            return {"check": "review_command", "passed": False, "budget_cut": True,
                    "outcome": NOT_REVIEWED, "reason": why}  # fmt: skip
        why = "review failed: the time limit (scorer_timeout_min) came first"
        return {"check": "review_command", "passed": False, "budget_cut": False,
                "outcome": FAILED, "reason": why}  # fmt: skip
    text = text.strip()
    return {
        "check": "review_command",
        "passed": proc.returncode == 0,
        "outcome": PASSED if proc.returncode == 0 else FAILED,
        "reason": text[-2000:] or f"exit code {proc.returncode}",
        "wall_s": ended - started,
        "ended_at": ended,
    }


def review(ring_dir, node_id: str) -> dict:
    ring, layout, _ = _ctx(ring_dir)
    node = load_node(ring, node_id)
    checks = [_view_blind_check(ring, layout, node)]
    if ring.config.review and checks[0]["outcome"] != NOT_REVIEWED:
        checks.append(_review_command(ring, layout, node_id))
    outcomes = {c["outcome"] for c in checks}
    # A failed check fails the review; a check cut by time leaves it not reviewed: never
    # "failed" for want of time, so its carried work is not refused for it.
    outcome = FAILED if FAILED in outcomes else NOT_REVIEWED if NOT_REVIEWED in outcomes else PASSED
    record = {
        "node": node_id,
        "passed": outcome == PASSED,
        "outcome": outcome,
        # Time ran out for it (not its cost): selection ends with the baseline, as for an
        # incomplete guard.
        "cut": outcome == NOT_REVIEWED and any(c.get("cut") or c.get("budget_cut") for c in checks),
        "checks": checks,
        "reasons": [c["reason"] for c in checks if not c["passed"]],
    }
    atomic_write_json(layout.review(node_id), record)
    if outcome == FAILED:
        emit_event(layout.root, "review_failed", node=node_id, reasons=record["reasons"])
    elif outcome == NOT_REVIEWED:
        emit_event(layout.root, "not_reviewed", node=node_id, reasons=record["reasons"])
    return record


def review_outcome(record: dict) -> str:
    """passed, failed or not_reviewed; a record written before outcomes existed says only
    passed or not."""
    return record.get("outcome") or (PASSED if record.get("passed") else FAILED)


def _guard_run(layout, node: str, view: str, seed: int, direction: str) -> dict:
    result_path = layout.result(node, view, f"g{seed}")
    result = read_result(result_path) if result_path.exists() else None
    score = read_score(layout, node, view, f"g{seed}")
    return {
        "view": view,
        "seed": seed,
        "status": None if result is None else result.status,
        "budget_cut": bool((result and result.budget_cut) or (score or {}).get("budget_cut")),
        "score": usable(score, direction),
        "bootstrap": (score or {}).get("bootstrap"),
        "reason": (score or {}).get("reason") or (result and result.reason) or "",
    }


def guard_runs(ring, layout, node: str) -> list[dict]:
    direction = ring.task.direction
    return [
        _guard_run(layout, node, view, seed, direction)
        for view in guard_views(ring)
        for seed in ring.guard_seeds
    ]


def side_problem(runs: list[dict]) -> tuple[str, str] | None:
    """("incomplete", why) when a run did not finish (time ran out, interrupted, missing);
    ("failed", why) when every run finished but one crashed or has no valid score."""
    for run in runs:
        where = f"{run['view']}/g{run['seed']}"
        if run["status"] is None:
            return "incomplete", f"guard run {where} has no result"
        if run["budget_cut"] or run["status"] == statuses.INTERRUPTED:
            return "incomplete", f"guard run {where} was cut or interrupted: {run['reason']}"
    for run in runs:
        where = f"{run['view']}/g{run['seed']}"
        if run["status"] != statuses.OK:
            return "failed", f"guard run {where} {run['status']}: {run['reason']}".rstrip(": ")
        if run["score"] is None or not run["bootstrap"]:
            return "failed", f"guard run {where} has no valid score: {run['reason']}"
    return None


def per_seed_means(ring, runs: list[dict]) -> list[float | None]:
    """One side's score per guard seed: its mean over the guard views."""
    by_seed = {seed: {} for seed in ring.guard_seeds}
    for run in runs:
        by_seed[run["seed"]][run["view"]] = run["score"]
    table = guardstats.per_seed_side_scores(by_seed, guard_views(ring))
    return [table[seed] for seed in ring.guard_seeds]


def _bootstrap_tables(runs: list[dict]) -> dict:
    table: dict = {}
    for run in runs:
        table.setdefault(run["view"], {})[run["seed"]] = run["bootstrap"]
    return table


def guarded_before(ring: Ring, node_id: str) -> dict | None:
    """The earlier ring of the chain that already guarded this program (same tree) on a
    guard view with the same content, if any: it is not guarded again on those rows."""
    if not ring.continue_from:
        return None
    mine = {ring.views[v].content_hash for v in guard_views(ring)}
    tree = load_node(ring, node_id).tree_hash
    previous = (Path(ring.ring_dir) / ring.continue_from).resolve()
    for ancestor in chain_rings(previous):
        root = Path(ancestor.ring_dir)
        for path in RingLayout(root).verdicts():
            try:
                old = read_json(path)
                old_tree = read_node(RingLayout(root).node_json(old["node"])).tree_hash
            except (InputError, KeyError, OSError):
                continue
            guard = old.get("guard") or {}
            if not old.get("eligible") or not guard.get("ran", True) or old_tree != tree:
                continue
            views = guard.get("views") or list(ancestor.search_views)
            hashes = {ancestor.views[v].content_hash for v in views if v in ancestor.views}
            if hashes & mine:
                return {"ring": ancestor.ring_id, "node": old["node"], "views": views}
    return None


def guarded_before_reason(before: dict, node_id: str) -> str:
    """Why a finalist is not guarded again; the earlier ring may have guarded the same
    program under another node (a copy of it), which the reason names."""
    who = "" if before["node"] == node_id else f" as {before['node']} (the same program)"
    return (
        f"already guarded in ring {before['ring']}{who} on the same guard rows: not guarded again"
    )


def _guard_record(ring, seeds, views, alpha, margin) -> dict:
    return {"seeds": seeds, "views": views, "alpha": alpha, "margin": margin, "lcb": None,
            "mean": None, "complete": False, "failed": None, "ran": True,
            "reused_search_rows": reuses_search_rows(ring)}  # fmt: skip


def verdict(ring_dir, rank: int) -> dict:
    ring, layout, _ = _ctx(ring_dir)
    ranking = read_json(layout.ranking)
    node = ranking["finalists"][rank - 1]
    record: dict = {"rank": rank, "node": node}
    before = guarded_before(ring, node)
    if before is not None:
        # Not guarded again, so not reviewed either: the review would decide nothing.
        record.update(
            review=None,
            eligible=False,
            replace=False,
            guarded_before=before,
            outcome="guarded_before",
            reason=guarded_before_reason(before, node),
        )
        atomic_write_json(layout.verdict(rank), record)
        return record
    rev = read_json(layout.review(node))
    record["review"] = rev
    reviewed = review_outcome(rev)
    if reviewed != PASSED:
        why = "; ".join(rev["reasons"])
        if reviewed == NOT_REVIEWED:
            record.update(eligible=False, replace=False, outcome=NOT_REVIEWED,
                          cut=bool(rev.get("cut")), reason=f"not reviewed: {why}")  # fmt: skip
        else:
            record.update(eligible=False, replace=False, outcome="failed_review",
                          reason=f"review failed: {why}")  # fmt: skip
        atomic_write_json(layout.verdict(rank), record)
        return record
    guard = ring.config.guard
    seated = read_json(layout.seated)
    base = reference_node(seated)  # the incumbent, or the baseline
    side = seated.get("guard_against") or "baseline"
    seeds = ring.guard_seeds
    a_prime = guardstats.alpha_prime(guard.alpha, eligible_at_ranking(ring, ranking))
    info = _guard_record(ring, seeds, guard_views(ring), a_prime, guard.margin)
    cand_runs, base_runs = guard_runs(ring, layout, node), guard_runs(ring, layout, base)
    cand_side, base_side = per_seed_means(ring, cand_runs), per_seed_means(ring, base_runs)
    info.update(candidate=cand_side, baseline=base_side, against=base, against_role=side)
    base_problem, cand_problem = side_problem(base_runs), side_problem(cand_runs)
    replace = False
    if base_problem or (cand_problem and cand_problem[0] == "incomplete"):
        # Time ran out, or the baseline failed: selection ends with the baseline (no seed
        # shopping, no other finalist to save time).
        why = f"{side}'s {base_problem[1]}" if base_problem else cand_problem[1]
        reason = f"incomplete guard ({why}): {side} kept"
        record["outcome"] = "not_guarded"
    elif cand_problem:
        # The finalist's own run crashed or was invalid: it fails its guard, its alpha'
        # is spent, and selection moves on to the next finalist.
        info.update(complete=True, failed=cand_problem[1])
        reason = f"failed its guard ({cand_problem[1]}): not eligible"
        record["outcome"] = "failed_guard"
    else:
        info["complete"] = True
        info["differences"] = [
            (c - b) * (-1.0 if ring.task.direction == "minimize" else 1.0)
            for c, b in zip(cand_side, base_side, strict=True)
        ]
        stats = guardstats.paired_bootstrap_lcb(
            _bootstrap_tables(cand_runs),
            _bootstrap_tables(base_runs),
            alpha=a_prime,
            direction=ring.task.direction,
            rng_seed=f"{ring.alias_salt}/{node}",
        )
        kept = ("method", "replicates", "quantile_index", "mean", "min", "max", "spread",
                "interval", "detectable", "reason")  # fmt: skip
        # The mean advantage shown beside the guard seeds' table is theirs; the bootstrap's
        # own mean (over its replicates) stays in `bootstrap`.
        info.update(lcb=stats["lcb"], mean=fmean(info["differences"]),
                    bootstrap={k: stats[k] for k in kept})  # fmt: skip
        replace, reason = guardstats.guard_verdict(
            stats, margin=guard.margin, complete=True, against=side
        )
        record["outcome"] = "replaces" if replace else "not_better"
    record.update(eligible=True, replace=replace, reason=reason, guard=info)
    atomic_write_json(layout.verdict(rank), record)
    emit_event(layout.root, "guard_verdict", rank=rank, node=node, replace=replace, reason=reason)
    return record


def _weights_fingerprint(ring, node_id: str) -> dict:
    """The registered weights the chosen program runs with, per search view."""
    node = load_node(ring, node_id)
    store = WeightsStore(ring.store)
    views = {}
    for view in ring.search_views:
        key = node.executions[view]["s0"].get("key")
        entry = store.entry(node.tree_hash, key) if key else None
        views[view] = {
            "key": key,
            "files": None
            if entry is None
            else [{"path": f["path"], "sha256": f["sha256"]} for f in entry["files"]],
        }
    return {
        "per_view": views,
        "sha256": sha256_json(views) if any(v["files"] for v in views.values()) else None,
    }


def eligible_at_ranking(ring: Ring, ranking: dict) -> int:
    """How many finalists the per-finalist level is divided among: those ranked (at most
    final_top_k), never fewer than one."""
    return max(1, min(final_top_k(ring), len(ranking.get("finalists") or [])))


def verdicts_in_order(ring: Ring, layout: RingLayout) -> list[dict]:
    """The finalists' verdicts in rank order, up to the first that ends selection."""
    verdicts = []
    for rank in range(1, final_top_k(ring) + 1):
        if not layout.verdict(rank).exists():
            break
        verdicts.append(read_json(layout.verdict(rank)))
        if ends_selection(verdicts[-1]):
            break
    return verdicts


def _final_score(ring, layout, node: str | None) -> float | None:
    if node is None:
        return None
    return usable(read_score(layout, node, ring.final_view, "s0"), ring.task.direction)


def _mean(values) -> float | None:
    values = list(values or [])
    return fmean(values) if values and all(v is not None for v in values) else None


def finalists_story(ring, layout, ranking: dict, verdicts: list[dict], base: str | None):
    """Every finalist's promotion mean, guard mean and final-view score; the baseline's."""
    by_node = {v["node"]: v for v in verdicts}
    promoted = {row["node"]: row for row in ranking["ranked"]}
    rows = []
    for rank, node in enumerate(ranking["finalists"], start=1):
        item = by_node.get(node)
        guard = (item or {}).get("guard") or {}
        promo = promoted.get(node, {}).get("score")
        guard_mean = _mean(guard.get("candidate")) if guard.get("complete") else None
        rows.append({
            "rank": rank,
            "node": node,
            "promotion_mean": promo,
            "promotion_seeds": promoted.get(node, {}).get("seeds"),
            "review_passed": None if item is None or item["review"] is None
            else item["review"]["passed"],
            "guarded": bool(guard),
            "guard_mean": guard_mean,
            "shrinkage": None if promo is None or guard_mean is None else guard_mean - promo,
            "lcb": guard.get("lcb"),
            "final_view": _final_score(ring, layout, node),
            "verdict": "not reached: selection ended before this finalist"
            if item is None else item["reason"],
        })  # fmt: skip
    baseline = None
    if base is not None:
        guarded = [v["guard"] for v in verdicts if v.get("guard", {}).get("complete")]
        baseline = {
            "node": base,
            "search_mean": node_mean(ring, layout, base, "s0")["mean"],
            "search": node_mean(ring, layout, base, "s0")["per_view"],
            "guard_mean": _mean(guarded[0]["baseline"]) if guarded else None,
            "final_view": _final_score(ring, layout, base),
        }
    return rows, baseline


def baseline_alone(ring, layout, base: str | None) -> dict | None:
    """The configured baseline's scores where the guard compared against the incumbent
    (it ran on the search and final views, not on this ring's guard seeds)."""
    if base is None:
        return None
    search = node_mean(ring, layout, base, "s0")
    return {"node": base, "search_mean": search["mean"], "search": search["per_view"],
            "guard_mean": None, "final_view": _final_score(ring, layout, base)}  # fmt: skip


GUARD_VIEWS_REUSED = (
    "Every guard view of the task was guarded on by an earlier ring of this chain: a "
    "program chosen there (the incumbent) was chosen on these rows, so its score here is "
    "biased upward and a comparison against it is conservative (a better candidate can be "
    "missed, never wrongly adopted). Declare another guard view for fresh rows."
)


def story_gap(ring, chosen: str | None, rows: list[dict], baseline: dict | None) -> dict:
    scores = {row["node"]: row["final_view"] for row in rows if row["guarded"] or
              row["node"] == chosen}  # fmt: skip
    if baseline is not None:
        scores[baseline["node"]] = baseline["final_view"]
    if chosen is not None and chosen not in scores:
        scores[chosen] = None
    return {"view": ring.final_view, **selection_gap(chosen, scores, ring.task.direction)}


def _shrinkage(rows: list[dict]) -> dict | None:
    """The winner's curse: the top guarded finalist's promotion mean against its guard mean."""
    for row in rows:
        if row["guard_mean"] is not None:
            return {k: row[k] for k in ("node", "promotion_mean", "guard_mean", "shrinkage")}
    return None


FIXED_SCORER_WARNING = (
    "The task's scorer gives one number per output (scorer_resamples: false): the guard's "
    "bound covers the programs' own noise only, not which rows happen to be in the guard "
    "view, so with equally good programs it replaces the baseline far more often than alpha."
)


RESAMPLED_BY = {"resample": "the scorer (--seed)", "rows": "ringflow", "fixed": None}


def guard_covered(ring: Ring) -> dict:
    """What the guard's bound judged (docs/guard.md#what-the-guard-judges)."""
    mode = scorer_mode(ring.task)
    retrain = bool(ring.config.guard.retrain)
    return {
        "program_noise": True,
        "rows": mode != "fixed",
        # Retrained per guard seed (guard.retrain), or the programs' training follows
        # their seed anyway: either way each guard run had its own training.
        "training_luck": retrain,
        "guard_training_seeds": "10000 + the guard seed (or the guard seed, for a program "
        "whose training follows its seed)"
        if retrain
        else None,
        "scorer_mode": mode,
        "rows_resampled_by": RESAMPLED_BY[mode],
    }


def passed_over(ranking: dict, verdicts: list[dict], chosen: str | None) -> list[dict]:
    """Every finalist that was not chosen, and why."""
    by_node = {v["node"]: v for v in verdicts}
    rows = []
    for rank, node in enumerate(ranking["finalists"], start=1):
        if node == chosen:
            continue
        item = by_node.get(node)
        rows.append({
            "rank": rank,
            "node": node,
            "outcome": (item or {}).get("outcome") or ("not_reached" if item is None else
                                                       "not_chosen"),
            # (the outcome says "not reached"; the reason says why)
            "reason": "selection ended before this finalist" if item is None
            else item["reason"],
        })  # fmt: skip
    return rows


def _final_bootstrap(ring, layout, node: str | None) -> list[float] | None:
    if node is None:
        return None
    score = read_score(layout, node, ring.final_view, "s0") or {}
    return score.get("bootstrap") if score.get("valid") else None


def improvement(ring, layout, chosen: str | None, base: str | None, alpha: float) -> dict:
    """The chosen program's final-view score minus the baseline's, with a paired bootstrap
    interval over the final view's rows (the same resamples for both)."""
    sign = -1.0 if ring.task.direction == "minimize" else 1.0
    mine, theirs = _final_score(ring, layout, chosen), _final_score(ring, layout, base)
    record = {"view": ring.final_view, "chosen": chosen, "baseline": base,
              "difference": None, "interval": None, "level": 1 - alpha}  # fmt: skip
    if mine is None or theirs is None:
        return record
    record["difference"] = sign * (mine - theirs)
    a, b = _final_bootstrap(ring, layout, chosen), _final_bootstrap(ring, layout, base)
    if a and b and len(a) == len(b):
        diffs = sorted(sign * (x - y) for x, y in zip(a, b, strict=True))
        k = max(0, int(alpha / 2 * len(diffs)) - 1)
        record["interval"] = [diffs[k], diffs[len(diffs) - 1 - k]]
    return record


def winners_curse(
    chosen: str | None, rows: list[dict], baseline: dict | None, verdicts, direction: str
) -> dict:
    """The chosen finalist's change from its promotion mean to its guard mean, minus the
    baseline's own change from its search mean to its guard mean (the curse, net of how
    much harder the guard view is); the top guarded finalist's when the baseline stays.

    All three are signed in the task's direction, as the guard's differences are: negative
    is worse, so a negative `curse` is the winner's curse under either direction."""
    row = next((r for r in rows if r["node"] == chosen and r["guard_mean"] is not None), None)
    row = row or next((r for r in rows if r["guard_mean"] is not None), None)
    if row is None or baseline is None or baseline.get("guard_mean") is None:
        return {"node": None, "curse": None, "interval": None}
    verdict = next((v for v in verdicts if v["node"] == row["node"]), {})
    sign = -1.0 if direction == "minimize" else 1.0
    base_change = sign * (baseline["guard_mean"] - baseline["search_mean"])
    change = sign * row["shrinkage"]
    # The guard's paired-difference interval (already in the task's direction) less the
    # (fixed) search difference.
    interval = ((verdict.get("guard") or {}).get("bootstrap") or {}).get("interval")
    search_gap = sign * (row["promotion_mean"] - baseline["search_mean"])
    return {
        "node": row["node"],
        "change": change,
        "baseline_change": base_change,
        "curse": change - base_change,
        "interval": None if interval is None else [v - search_gap for v in interval],
    }


def ships(ring, layout, node: str) -> dict:
    """Which weights final/solution/ holds: those trained on the final view by its seed-0
    run (not the guard's runs, which trained or replayed on the guard views)."""
    trains = bool(load_node(ring, node).solution["per_view_paths"])
    return {
        "node": node,
        "run": f"{ring.final_view}/s0",
        "weights": "trained on the final view" if trains else "none (the program has none)",
        "final_view_score": _final_score(ring, layout, node),
        "guard_judged_same_weights": False if trains else None,
    }


def closest_to_passing(guarded: list[dict]) -> dict | None:
    """Of the finalists guarded, none of which won: the one whose complete guard has the
    highest lower bound (the first in rank order on a tie), else the last one guarded. A
    finalist that scored exactly as the reference on every run has no bound (no spread):
    its mean difference, which is then the whole of it, stands for one."""
    measured = [v for v in guarded
                if v["guard"].get("complete") and _closeness(v["guard"]) is not None]  # fmt: skip
    if measured:
        return max(measured, key=lambda verdict: _closeness(verdict["guard"]))
    return guarded[-1] if guarded else None


def _closeness(guard: dict) -> float | None:
    return guard["lcb"] if guard.get("lcb") is not None else guard.get("mean")


def decide(ring_dir) -> dict:
    ring, layout, _ = _ctx(ring_dir)
    seated = read_json(layout.seated)
    if seated["refused"]:
        record = {"decision": "refused", "reason": seated["reason"], "final_written": False}
        write_record(layout.root, layout.decision, record)
        return record
    verdicts = verdicts_in_order(ring, layout) if ring.config.guard.enabled else []
    ranking = read_json(layout.ranking)
    base = seated["baseline"]
    ref = reference_node(seated)  # the incumbent, or the baseline
    side = seated.get("guard_against") or "baseline"
    chosen, reason, chosen_verdict = choose(ring, seated, ranking, verdicts)
    if chosen is None:
        record = {
            "decision": "none",
            "reason": "no baseline and no finalist",
            "final_written": False,
        }
        write_record(layout.root, layout.decision, record)
        return record
    rows, baseline = finalists_story(ring, layout, ranking, verdicts, ref)
    configured_baseline = baseline if ref == base else baseline_alone(ring, layout, base)
    guarded = [v for v in verdicts if v.get("guard")]
    a_prime = guardstats.alpha_prime(ring.config.guard.alpha, eligible_at_ranking(ring, ranking))
    shown = chosen_verdict or closest_to_passing(guarded)
    guard = (
        shown["guard"]
        if shown
        else {
            **_guard_record(
                ring,
                ring.guard_seeds,
                guard_views(ring),
                a_prime,
                ring.config.guard.margin,
            ),
            "ran": False,
        }
    )
    chosen_row = next((r for r in rows if r["node"] == chosen), None)
    warnings = [REUSE_WARNING] if reuses_search_rows(ring) else []
    if scorer_mode(ring.task) == "fixed":
        warnings.append(FIXED_SCORER_WARNING)
    if (seated.get("incumbent") or {}).get("warning"):
        warnings.append(seated["incumbent"]["warning"])
    if ring.guard_views_reused:
        warnings.append(GUARD_VIEWS_REUSED)
    if not ring.sandbox.confined:
        warnings.append("sandbox.mode: none: every program of this ring ran unconfined")
    record = {
        "decision": "baseline" if chosen == base else side if chosen == ref else "candidate",
        "chosen": chosen,
        "baseline": base,
        # What the guard compared the finalists against (docs/guard.md#the-incumbent).
        "guard_against": side,
        "reference": ref,
        "incumbent": seated.get("incumbent"),
        "reason": reason,
        "guard": guard,
        # Whose guard record `guard` is: the chosen candidate's, or where none won the
        # finalist that came closest to passing.
        "guard_of": shown["node"] if shown else None,
        "guard_ran": bool(guarded) and ring.config.guard.enabled,
        "complete": bool(guard.get("complete")),
        "verdicts": verdicts,
        "reviews": [v["review"] for v in verdicts if v["review"] is not None],
        "finalists": rows,
        "baseline_scores": configured_baseline,
        "reference_scores": baseline,
        "promotion_mean": (chosen_row or {}).get("promotion_mean")
        if chosen != ref else (baseline or {}).get("search_mean"),
        "guard_mean": (chosen_row or {}).get("guard_mean")
        if chosen != ref else (baseline or {}).get("guard_mean"),
        "shrinkage": _shrinkage(rows),
        "final_view": {
            "view": ring.final_view,
            "chosen": _final_score(ring, layout, chosen),
            "baseline": _final_score(ring, layout, base),
            "reference": _final_score(ring, layout, ref),
        },
        # Biased upward when candidates are equal (the best of several noisy scores).
        "selection_gap": story_gap(ring, chosen, rows, baseline),
        "improvement": improvement(ring, layout, chosen, base, ring.config.guard.alpha),
        "improvement_over_reference": improvement(
            ring, layout, chosen, ref, ring.config.guard.alpha
        ),
        "winners_curse": winners_curse(chosen, rows, baseline, verdicts, ring.task.direction),
        "guard_judged": guard_covered(ring),
        # The smallest advantage the guard could detect, estimated before it ran from the
        # baseline's probe runs (docs/guard.md#power).
        "power_before": read_json(layout.power) if layout.power.exists() else None,
        "passed_over": passed_over(ranking, verdicts, chosen),
        "weights": _weights_fingerprint(ring, chosen),
        "ships": ships(ring, layout, chosen),
        "guard_reused_search_rows": reuses_search_rows(ring),
        # How every program of the ring was confined; "none" means unconfined (trusted).
        "sandbox": ring.sandbox.mode,
        "warnings": warnings,
        "note": ("Promotion scores are conditional on the frozen weights and the current "
        "data; guard scores " + ("include each guard seed's own training (guard.retrain)"
        if ring.config.guard.retrain else "are conditional on them too") +
        ". The guard's bound is a paired bootstrap over the guard rows and the "
        "guard seeds' runs; promotion means are on the search views, guard means on the "
        "guard views. Other guarded finalists run on the final view after the decision, "
        "when time remains; until then the selection gap compares only who ran there; it "
        "is biased upward when candidates are equal."),
        "decided_at": time.time(),
    }  # fmt: skip
    write_final(layout, chosen, record)
    write_record(layout.root, layout.decision, record)
    Ledger(layout.ledger).append(
        "final_decided", decision=record["decision"], chosen=chosen, baseline=base, reference=ref
    )
    emit_event(layout.root, "final_decided", decision=record["decision"], chosen=chosen)
    return record


def _output_hash(layout, node, view, variant) -> str | None:
    out = layout.exec_dir(node, view, variant) / "output"
    return listing_hash(listing(out)) if out.is_dir() else None


def trained_finalists(ring_dir, finalists: list[str]) -> list[str]:
    """Finalists that train weights: each gets one cold retrain (fresh-s0) after the decision."""
    ring = load_ring(ring_dir)
    return [n for n in finalists if load_node(ring, n).solution["per_view_paths"]]


def after_decision_final_runs(decision: dict) -> list[str]:
    """Guarded finalists that did not run on the final view for the decision: they do after
    it, when time remains, so the selection gap compares every guarded finalist."""
    sides = {decision.get("chosen"), decision.get("baseline"), decision.get("reference")}
    return [
        row["node"] for row in decision.get("finalists", [])
        if row["guarded"] and row["node"] not in sides
    ]  # fmt: skip


def complete_story(ring_dir) -> dict | None:
    """After the decision: add the other guarded finalists' final-view scores to FINAL.json
    and recompute the selection gap. The decision record (the decide checkpoint's output)
    is never rewritten: FINAL.json holds the whole story."""
    ring, layout, _ = _ctx(ring_dir)
    if not layout.decision.exists():
        return None
    record = read_json(layout.decision)
    if "finalists" not in record:
        return record
    for row in record["finalists"]:
        row["final_view"] = _final_score(ring, layout, row["node"])
    record["selection_gap"] = story_gap(
        ring, record["chosen"], record["finalists"], record.get("baseline_scores")
    )
    if (layout.final_dir / "FINAL.json").exists():
        write_record(layout.root, layout.final_dir / "FINAL.json", record)
    return record


def repro(ring_dir) -> dict:
    """Diagnostic only, after the decision: each trained finalist's cold retrain (fresh-s0)
    against its s0; then the rest of the final-view story."""
    ring, layout, _ = _ctx(ring_dir)
    decision = read_json(layout.decision)
    nodes = [] if decision["decision"] in ("refused", "none") else trained_finalists(
        ring_dir, read_json(layout.ranking)["finalists"])  # fmt: skip
    view = ring.search_views[0]
    direction = ring.task.direction
    rows = []
    for node in nodes:
        s0 = usable(read_score(layout, node, view, "s0"), direction)
        fresh = usable(read_score(layout, node, view, "fresh-s0"), direction)
        same = _output_hash(layout, node, view, "s0") == _output_hash(
            layout, node, view, "fresh-s0"
        )
        rows.append(
            {
                "node": node,
                "view": view,
                "s0": s0,
                "fresh_s0": fresh,
                "difference": None if s0 is None or fresh is None else fresh - s0,
                "outputs_identical": same,
            }
        )
    record = {"diagnostic_only": True, "checks": rows}
    complete_story(ring_dir)
    if layout.final_dir.exists():
        atomic_write_json(layout.repro, record)
    atomic_write_json(layout.repro_record, record)
    return record
