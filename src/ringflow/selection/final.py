"""Final selection (SPEC 10): baseline first, review, guard on fresh seeds, the final pick."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path
from statistics import fmean

from ..jsonio import atomic_write_json, fsync_dir, fsync_tree, read_json, sha256_json
from ..ring.clock import final_top_k, load_node, load_ring, stage_deadline
from ..ring.layout import RingLayout
from ..ring.ledger import Ledger, emit_event
from ..scoring import read_score, usable
from ..weights.hashing import listing, listing_hash
from ..weights.store import WeightsStore
from . import guardstats
from .deploy import complete_solution
from .promote import node_mean

EQUAL_TOL = 1e-9


def _ctx(ring_dir):
    ring = load_ring(ring_dir)
    layout = RingLayout(Path(ring["ring_dir"]))
    return ring, layout, read_json(layout.nodes_index)


def usable_baseline(index: dict) -> str | None:
    base = index["baseline"]
    ready = {n["id"] for n in index["nodes"] if n["status"] == "ready"}
    return base if base in ready else None


def guard_refused(ring: dict, index: dict) -> bool:
    return ring["config"]["guard"]["enabled"] and usable_baseline(index) is None


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
    if old.exists():
        shutil.rmtree(old)


def seat_baseline(ring_dir) -> dict:
    """Write the baseline to final/ before any candidate is reviewed."""
    ring, layout, index = _ctx(ring_dir)
    base = usable_baseline(index)
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
        record = {
            "decision": "baseline",
            "chosen": base,
            "baseline": base,
            "reason": "baseline seated before any candidate review; final selection pending",
            "baseline_search": node_mean(ring, layout, base, "s0"),
            "complete": False,
        }
        write_final(layout, base, record)
        seated = {"refused": False, "baseline": base, "reason": "baseline seated"}
        emit_event(layout.root, "baseline_seated", node=base)
    seated["at"] = time.time()
    atomic_write_json(layout.seated, seated)
    return seated


def _view_blind_check(ring, layout, node: dict) -> dict:
    """Same program, same seed, the same view under another name and path: same score?

    A trained program retrains on the disguised copy, so it is compared with its own
    retrain on the real view (fresh-s0); a difference no larger than the one between that
    retrain and its registered weights (s0) is retraining noise, not the view's identity.
    """
    view = ring["search_views"][0]
    direction = ring["task"]["direction"]
    trained = bool(node["solution"]["per_view_paths"])
    score_of = {v: usable(read_score(layout, node["id"], view, v), direction)
                for v in ("s0", "blind-s0", *(["fresh-s0"] if trained else []))}  # fmt: skip
    blind, ref = score_of["blind-s0"], score_of["fresh-s0" if trained else "s0"]
    check = {"check": "view_blind", "view": view, "blind": blind, "reference": ref,
             "reference_variant": "fresh-s0" if trained else "s0"}  # fmt: skip
    if blind is None or ref is None or (trained and score_of["s0"] is None):
        check.update(passed=False, reason="view-blind check incomplete: an execution failed")
        return check
    noise = abs(ref - score_of["s0"]) if trained else 0.0
    check["retrain_noise"] = noise
    if abs(blind - ref) > max(noise, EQUAL_TOL):
        check.update(passed=False, reason=(
            f"predictions depend on the view's identity: {blind:.6g} on a disguised copy of "
            f"{view} vs {ref:.6g} on {view} ({check['reference_variant']}), beyond the "
            f"retraining noise of {noise:.3g}"))  # fmt: skip
    else:
        check.update(passed=True, reason="same score on the disguised copy")
    return check


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
    """Run the review command; it stops at the review stage's live deadline (SPEC 7.4)."""
    command = ring["config"]["review"]
    argv = [*shlex.split(command), str(layout.node_dir(node_id))]
    started = time.time()
    limit = started + ring["config"]["scorer_timeout_min"] * 60
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
        return {"check": "review_command", "passed": False, "reason": f"review failed: {exc}"}
    text = _output_until(proc, lambda: min(limit, stage_deadline(ring, "review")))
    ended = time.time()
    if text is None:
        cut = stage_deadline(ring, "review") < limit  # a deadline, not the time limit
        why = "the review stage's deadline" if cut else "the time limit (scorer_timeout_min)"
        return {"check": "review_command", "passed": False, "budget_cut": cut,
                "reason": f"review failed: {why} came first"}  # fmt: skip
    text = text.strip()
    return {
        "check": "review_command",
        "passed": proc.returncode == 0,
        "reason": text[-2000:] or f"exit code {proc.returncode}",
        "wall_s": ended - started,
        "ended_at": ended,
    }


def review(ring_dir, node_id: str) -> dict:
    ring, layout, _ = _ctx(ring_dir)
    node = load_node(ring, node_id)
    checks = [_view_blind_check(ring, layout, node)]
    if ring["config"]["review"]:
        checks.append(_review_command(ring, layout, node_id))
    passed = all(c["passed"] for c in checks)
    record = {
        "node": node_id,
        "passed": passed,
        "checks": checks,
        "reasons": [c["reason"] for c in checks if not c["passed"]],
    }
    atomic_write_json(layout.review(node_id), record)
    if not passed:
        emit_event(layout.root, "review_failed", node=node_id, reasons=record["reasons"])
    return record


def guard_table(ring, layout, node: str) -> dict[int, float | None]:
    """Per guard seed: the side's mean over the search views (None when anything is missing)."""
    direction = ring["task"]["direction"]
    scores = {
        seed: {
            view: usable(read_score(layout, node, view, f"g{seed}"), direction)
            for view in ring["search_views"]
        }
        for seed in ring["guard_seeds"]
    }
    return guardstats.per_seed_side_scores(scores, ring["search_views"])


def verdict(ring_dir, rank: int) -> dict:
    ring, layout, index = _ctx(ring_dir)
    ranking = read_json(layout.ranking)
    node = ranking["finalists"][rank - 1]
    record: dict = {"rank": rank, "node": node}
    rev = read_json(layout.review(node))
    record["review"] = rev
    if not rev["passed"]:
        record.update(
            eligible=False, replace=False, reason="review failed: " + "; ".join(rev["reasons"])
        )
        atomic_write_json(layout.verdict(rank), record)
        return record
    guard = ring["config"]["guard"]
    base = usable_baseline(index)
    cand_side, base_side = guard_table(ring, layout, node), guard_table(ring, layout, base)
    seeds = ring["guard_seeds"]
    complete = all(cand_side[s] is not None and base_side[s] is not None for s in seeds)
    a_prime = guardstats.alpha_prime(guard["alpha"], final_top_k(ring))
    stats = None
    if complete:
        stats = guardstats.paired_lcb(
            [cand_side[s] for s in seeds],
            [base_side[s] for s in seeds],
            alpha=a_prime,
            direction=ring["task"]["direction"],
        )
    replace, why = guardstats.guard_verdict(
        stats or {"lcb": None}, margin=guard["margin"], complete=complete
    )
    record.update(
        eligible=True,
        replace=replace,
        reason=why,
        guard={
            "seeds": seeds,
            "candidate": [cand_side[s] for s in seeds],
            "baseline": [base_side[s] for s in seeds],
            "differences": None if stats is None else stats["differences"],
            "lcb": None if stats is None else stats["lcb"],
            "mean": None if stats is None else stats["mean"],
            "sd": None if stats is None else stats["sd"],
            "alpha": a_prime,
            "margin": guard["margin"],
            "complete": complete,
        },
    )
    atomic_write_json(layout.verdict(rank), record)
    emit_event(layout.root, "guard_verdict", rank=rank, node=node, replace=replace, reason=why)
    return record


def _weights_fingerprint(ring, node_id: str) -> dict:
    """The registered weights the chosen program runs with, per search view."""
    node = load_node(ring, node_id)
    store = WeightsStore(ring["store"])
    views = {}
    for view in ring["search_views"]:
        key = node["executions"][view]["s0"].get("key")
        entry = store.entry(node["tree_hash"], key) if key else None
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


def choose(ring: dict, seated: dict, ranking: dict, verdicts: list[dict]):
    """(chosen node or None, reason, the verdict that chose it or None)."""
    base = seated["baseline"]
    top = ranking["finalists"][0] if ranking["finalists"] else None
    if base is None:
        return top, "no baseline and guard disabled: the top finalist by 3-seed mean", None
    if not ring["config"]["guard"]["enabled"]:
        if top is None:
            return base, "guard disabled and no finalist: baseline kept", None
        return top, "guard disabled: the top finalist by 3-seed mean (no protection)", None
    for item in verdicts:
        if item["replace"]:
            return item["node"], item["reason"], item
    if not verdicts:
        return base, "baseline kept: no finalist", None
    return (
        base,
        "baseline kept: " + "; ".join(f"{v['node']}: {v['reason']}" for v in verdicts),
        None,
    )


def ends_selection(verdict: dict) -> bool:
    """A replacement ends final selection, and so does an incomplete guard: the baseline
    stays, and no other finalist is tried in its place to save time (SPEC 10)."""
    return verdict["replace"] or (verdict["eligible"] and not verdict["guard"]["complete"])


def verdicts_in_order(ring: dict, layout: RingLayout) -> list[dict]:
    """The finalists' verdicts in rank order, up to the first that ends selection."""
    verdicts = []
    for rank in range(1, final_top_k(ring) + 1):
        if not layout.verdict(rank).exists():
            break
        verdicts.append(read_json(layout.verdict(rank)))
        if ends_selection(verdicts[-1]):
            break
    return verdicts


def decide(ring_dir) -> dict:
    ring, layout, _ = _ctx(ring_dir)
    seated = read_json(layout.seated)
    final_view = ring["final_view"]
    direction = ring["task"]["direction"]
    if seated["refused"]:
        record = {"decision": "refused", "reason": seated["reason"], "final_written": False}
        atomic_write_json(layout.decision, record)
        return record
    verdicts = verdicts_in_order(ring, layout) if ring["config"]["guard"]["enabled"] else []
    ranking = read_json(layout.ranking)
    base = seated["baseline"]
    chosen, reason, chosen_verdict = choose(ring, seated, ranking, verdicts)
    if chosen is None:
        record = {
            "decision": "none",
            "reason": "no baseline and no finalist",
            "final_written": False,
        }
        atomic_write_json(layout.decision, record)
        return record
    promoted = {row["node"]: row for row in ranking["ranked"]}
    guard = (
        chosen_verdict["guard"]
        if chosen_verdict
        else (verdicts[-1]["guard"] if verdicts and "guard" in verdicts[-1] else None)
    )
    record = {
        "decision": "baseline" if chosen == base else "candidate",
        "chosen": chosen,
        "baseline": base,
        "reason": reason,
        "guard": guard,
        "guard_ran": bool(verdicts) and ring["config"]["guard"]["enabled"],
        "complete": bool(guard and guard["complete"]),
        "verdicts": verdicts,
        "reviews": [v["review"] for v in verdicts],
        "promotion_mean": promoted.get(chosen, {}).get("score"),
        "guard_mean": (
            fmean(guard["candidate"]) if chosen != base and guard and guard["complete"] else None
        ),
        "final_view": {
            "view": final_view,
            "chosen": usable(read_score(layout, chosen, final_view, "s0"), direction),
            "baseline": None
            if base is None
            else usable(read_score(layout, base, final_view, "s0"), direction),
        },
        "weights": _weights_fingerprint(ring, chosen),
        "note": "Guard and promotion scores are conditional on the frozen weights and the "
        "current data. With 5 guard seeds only large effects (about 1.4 standard deviations "
        "of the paired difference) pass reliably; raise guard.seeds for smaller ones.",
        "decided_at": time.time(),
    }
    write_final(layout, chosen, record)
    atomic_write_json(layout.decision, record)
    Ledger(layout.ledger).append(
        "final_decided", decision=record["decision"], chosen=chosen, baseline=base
    )
    emit_event(layout.root, "final_decided", decision=record["decision"], chosen=chosen)
    return record


def _output_hash(layout, node, view, variant) -> str | None:
    out = layout.exec_dir(node, view, variant) / "output"
    return listing_hash(listing(out)) if out.is_dir() else None


def trained_finalists(ring_dir, finalists: list[str]) -> list[str]:
    """Finalists that train weights: their cold retrain (fresh-s0) ran for their review."""
    ring = load_ring(ring_dir)
    return [n for n in finalists if load_node(ring, n)["solution"]["per_view_paths"]]


def repro(ring_dir) -> dict:
    """Diagnostic only: each trained finalist's cold retrain (fresh-s0) against its s0."""
    ring, layout, _ = _ctx(ring_dir)
    nodes = trained_finalists(ring_dir, read_json(layout.ranking)["finalists"])
    view = ring["search_views"][0]
    direction = ring["task"]["direction"]
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
    if layout.final_dir.exists():
        atomic_write_json(layout.repro, record)
    atomic_write_json(layout.repro_record, record)
    return record
