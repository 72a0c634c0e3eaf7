"""Plain-text views of a ring: the end-of-search record and the one-screen summary."""

from __future__ import annotations

import shlex
import time
from collections import Counter
from pathlib import Path

from ..carryover.scored import summary_lines as scored_summary
from ..core import statuses
from ..core.clock import load_ring
from ..core.hints import ringflow_command, shown_path
from ..core.jsonio import atomic_write_json, read_json, read_jsonl_objects
from ..core.layout import RingLayout
from ..core.node_state import ExecutionResult, read_node, read_result
from ..core.safetext import printable
from ..core.state import Ring
from ..search.best_so_far import ring_progress
from ..selection.deploy import INPUTS, PREDICTIONS
from ..selection.incumbent import chosen_as
from ..selection.scores import node_mean
from .digest import digest_lines, failure_digest
from .headline import guarded_candidate
from .numbers import advantage, figure


def write_search_summary(ring_dir) -> dict:
    ring = load_ring(ring_dir)
    layout = RingLayout(Path(ring.ring_dir))
    index = read_json(layout.nodes_index)
    rows = {
        n["id"]: node_mean(ring, layout, n["id"], "s0")
        for n in index["nodes"]
        if n["status"] == statuses.READY
    }
    record = {"ended_at": time.time(), "seed0": rows}
    atomic_write_json(layout.search, record)
    return record


def executions(layout: RingLayout):
    """Every result.json of the ring, as (node, view, variant, result)."""
    for node, view, variant, path in layout.results():
        yield node, view, variant, read_result(path)


def _fmt(value) -> str:
    return figure(value)


def _valid(layout: RingLayout, node: str, view: str, variant: str) -> bool:
    """A run counts as scored when the scorer gave it a valid score."""
    path = layout.score(node, view, variant)
    if not path.exists():
        return False
    score = read_json(path)
    return bool(score.get("scored") and score.get("valid"))


def _after(seconds: float) -> str:
    """A time since the ring's start: tenths under 10 s (a quick ring's first result
    comes well within a second, which whole seconds would show as 0 s)."""
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"


def progress_lines(progress: dict, unranked: frozenset[str] = frozenset()) -> list[str]:
    """The best of this ring's own results on the proxy view, when it came, and the first
    valid one (seed-0 runs and background evaluations, the same in blind and native rings).
    Scores a continuation imported are not runs of its own: the progress line's best so
    far counts them, this line does not, and says so by its words. `unranked`: the nodes
    with no seed-0 mean (a search view without a valid score), which that run's node is
    said to be among."""
    best, first = progress["best"], progress["first_valid"]
    if best is None:
        return [f"best run of this ring on {progress['view']}: no valid result"]
    evaluations = sum(b["evaluations"] for b in progress["background"].values())
    scored = sum(b["scored"] for b in progress["background"].values())
    how = "background evaluation" if first["source"] == "background" else "seed 0"
    ranked = ""
    if best.get("source") != "background" and best["node"] in unranked:
        ranked = f" ({best['node']} is not ranked: a search view has no valid seed-0 score)"
    lines = [
        f"best run of this ring on {progress['view']}: {best['score']:.4f} ({best['node']}, after "
        f"{_after(best['t'])}); first valid result after {_after(first['t'])} "
        f"({first['node']}, {how}){ranked}",
    ]
    if evaluations:  # an engineer's evaluations of its own drafts, where there were any
        lines.append(f"background evaluations: {evaluations} ({scored} scored)")
    return lines


def origin_label(layout: RingLayout, entry: dict) -> str:
    """Where a node comes from: baseline, static (a candidate folder), draft/improve (an
    engineer session, with its generation), resume (carried-over work) or imported."""
    if entry.get("role") == "baseline":
        return "baseline"
    path = layout.node_json(entry["id"])
    origin = (read_node(path).origin or {}) if path.exists() else {}
    kind = origin.get("kind") or "static"
    if kind in ("draft", "improve") and origin.get("generation") is not None:
        return f"{kind} g{origin['generation']}"
    return kind


# How an engineer session ended (its node.json's session.status), in words.
SESSION_ENDS = {"ended": "finished", "cut": "cut at the hand-over point",
                "crash": "crashed", "timeout": "timed out", "stalled": "stalled",
                "interrupted": "interrupted", "not_started": "not started"}  # fmt: skip


def session_lines(layout: RingLayout, nodes: list[dict]) -> list[str]:
    """How the ring's engineer sessions ended; those that did not finish or stop at
    the hand-over point by name, whatever became of their node."""
    ends: Counter = Counter()
    badly = []
    for entry in nodes:
        path = layout.node_json(entry["id"])
        session = (read_node(path).session or {}) if path.exists() else {}
        status = session.get("status")
        if not status:
            continue
        ends[status] += 1
        if status not in ("ended", "cut"):
            badly.append(f"{entry['id']} {SESSION_ENDS.get(status, status)}")
    if not ends:
        return []
    said = ", ".join(f"{count} {SESSION_ENDS.get(status, status)}"
                     for status, count in sorted(ends.items()))  # fmt: skip
    line = f"engineer sessions: {sum(ends.values())} ({said})"
    if badly:
        line += "; see their nodes' trajectory/stderr.log: " + ", ".join(badly)
    return [line]


def own_session_lines(runs: list) -> list[str]:
    """Runs whose program started a process in a session of its own (a daemon): stopped
    with the run here, it would outlive the program deployed elsewhere."""
    found = [f"{node} ({view}/{variant})" for node, view, variant, result in runs
             if any(e.get("event") == "own_session" for e in result.events)]  # fmt: skip
    if not found:
        return []
    shown = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
    return [f"daemons: {len(found)} run(s) started a process in a session of its own, which "
            f"ringflow stopped with the run but which would outlive the program elsewhere: "
            f"{shown}"]  # fmt: skip


def edited_folder_lines(layout: RingLayout, nodes: list[dict]) -> list[str]:
    """A candidate folder that a continuation imported and that was edited since shows as
    two nodes of one name: say which is which."""
    origins = {}
    for entry in nodes:
        path = layout.node_json(entry["id"])
        origins[entry["id"]] = (read_node(path).origin or {}) if path.exists() else {}
    imported = {e.get("name"): e["id"] for e in nodes
                if origins[e["id"]].get("kind") == "imported"}  # fmt: skip
    lines = []
    for entry in nodes:
        old = imported.get(entry.get("name"))
        if old is None or entry.get("role") == "baseline":
            continue
        if (origins[entry["id"]].get("kind") or "static") != "static":
            continue
        ring = origins[old].get("ring") or "an earlier ring"
        lines.append(f"{entry['id']} is the folder {entry['name']} as it is now; {old} is the "
                     f"program it held when ring {ring} ran it (edited since)")  # fmt: skip
    return lines


def carryover_lines(layout: RingLayout, nodes: list[dict]) -> list[str]:
    """What crossed the ring boundary: work this ring sealed for the next one, and sealed
    work it imported and resumed (docs/operations.md#carryover)."""
    lines = []
    imported_path = layout.carryover_imported
    if imported_path.exists():
        imported = read_json(imported_path)
        resumed = []
        for entry in nodes:
            path = layout.node_json(entry["id"])
            origin = (read_node(path).origin or {}) if path.exists() else {}
            if origin.get("kind") == "resume":
                resumed.append(f"{entry['id']} ({origin.get('carry_kind')}, "
                               f"{origin.get('identity')}): {entry['status']}")  # fmt: skip
        rejected = imported.get("rejected") or []
        refused = imported.get("refused") or []
        if imported.get("imported") or rejected or resumed or refused:
            lines.append(f"carried in: {len(imported.get('imported') or [])} sealed piece(s) of "
                         f"work verified, {len(rejected)} rejected")  # fmt: skip
            lines += [f"  resumed {line}" for line in resumed]
            lines += [f"  rejected {r.get('identity')}: {r.get('reason')}" for r in rejected]
            lines += [f"  not resumed {r.get('identity')}: {r.get('reason')}" for r in refused]
        # Scored work and comparability (docs/operations.md#chains).
        lines += scored_summary(layout.root, imported)
    if layout.carryover_seals.exists():
        seals = read_json(layout.carryover_seals)
        carried = "piece(s) of work sealed for the next ring"
        lines += _seal_block(seals.get("seals"), seals.get("refused"), carried, "carried out")
        lines += _seal_block(seals.get("evidence"), seals.get("evidence_refused"),
                             "session(s) cut at the hand-over with a runnable program, sealed "
                             "(never carried)", "evidence")  # fmt: skip
    return ["", *lines] if lines else []


def _seal_block(sealed: list | None, refused: list | None, what: str, title: str) -> list[str]:
    """A heading with the count, one line per seal (its kind where it has one), one per
    node that was not sealed and why."""
    if not sealed and not refused:
        return []
    lines = [f"{title}: {len(sealed or [])} {what}"]
    for seal in sealed or []:
        kind = f" ({seal['kind']})" if seal.get("kind") and title != "evidence" else ""
        lines.append(f"  {seal['node']}{kind} -> {seal['snapshot']}")
    lines += [f"  not sealed {item.get('node')}: {item.get('reason')}" for item in refused or []]
    return lines


# What a failure kind is called in a node's row: what happened, in plain words.
HAPPENED = {
    "crash": "crashed",
    "hung": "hung",
    "timeout": "timed out",
    "interrupted": "interrupted",
    "invalid": "invalid",
    "not scored": "not scored",
    "skipped": "skipped",
    "scorer failed": "scorer failed",
    "validator failed": "validator failed",
}
# A training run that did not end ok stored nothing (execute.py registers ok runs only).
UNSTORED_TRAINING = "train-unstored"
WEIGHTS_WORDS = {
    "train": "trained and stored",
    UNSTORED_TRAINING: "began training and stored nothing (the run did not end ok)",
    "replay": "reused from the store (no training)",
    "fresh": "trained from scratch, not stored (reproduction checks)",
    "none": "of programs without weights",
}
GLOSSARY = (
    "Words used here: a run is one execution of a program on one view (a part of the data) "
    "with one seed; in the table, runs ok counts a node's runs whose program ended without "
    "an error and scored those whose output its scorer found valid (a run can be ok and "
    "still unscored); seed-0 is a program's mean score over the search views with seed 0, "
    "3-seed the mean over seeds 0-2 of the programs promoted to final selection; the guard "
    "checks a finalist against the baseline (in a ring that continues another, the chain's "
    "incumbent: what the earlier ring's final/ holds) on fresh seeds and rows no program "
    "was chosen on, and replaces it only when the improvement it is sure of (its lower "
    "bound, at the stated confidence) beats the margin."
)


def resume_lines(layout: RingLayout) -> list[str]:
    """The interruptions the ring resumed from: their runs ran again, and their records
    were set aside (workflow/resume.py), so only the events keep them."""
    reruns = [e for e in read_jsonl_objects(layout.events) if e.get("kind") == "interrupted_rerun"]
    if not reruns:
        return []
    runs = sum(len(e.get("executions") or []) for e in reruns)
    times = f"{len(reruns)} time{'s' if len(reruns) != 1 else ''}"
    return [f"resumed: {times} after an interruption; {runs} run(s) it stopped ran again "
            "(events.jsonl: interrupted_rerun)"]  # fmt: skip


def _weights_kind(result: ExecutionResult) -> str | None:
    """What a run did with weights, as the summary counts it."""
    if result.weights_mode == statuses.TRAIN and (
        result.status != statuses.OK or (result.reason or "").startswith("weights not registered")
    ):
        return UNSTORED_TRAINING
    return result.weights_mode


def node_happened(node: dict, runs: list[ExecutionResult], failures: list) -> str:
    """What happened to a node, e.g. `ok 8/8`, `crashed 4/4`, `invalid 1/4, ok 3/4`."""
    if node["status"] == statuses.REJECTED:
        return "rejected"
    if node["status"] != statuses.READY:
        return node["status"].replace("_", " ")
    if not runs:
        # An imported node still ready is comparable (its earlier scores count here as they
        # are) or owed a rescore; carryover/scored.py settles which.
        return "scored earlier" if node.get("imported") and not node.get("rescore") else "not run"
    total = len(runs)
    parts = [f"{HAPPENED.get(f.kind, f.kind)} {f.count}/{total}" for f in failures]
    cut = sum(1 for r in runs if r.budget_cut)
    good = total - sum(f.count for f in failures) - cut
    if good:
        parts.append(f"ok {good}/{total}")
    if cut:
        parts.append(f"cut {cut}/{total}")
    return ", ".join(parts)


def deploy_lines(ring: Ring, layout: RingLayout) -> list[str]:
    """The commands that take final/ out of the ring and run it on new inputs."""
    manifest_path = layout.final_dir / "solution" / "MANIFEST.json"
    if not manifest_path.exists():
        return []
    manifest = read_json(manifest_path)
    dest = f"{ring.ring_id}-model"
    root = shlex.quote(shown_path(layout.root))
    return [
        f"  to deploy it: {ringflow_command()} export {root} {dest}",
        "    then run it on new inputs: " + run_command(ring, manifest, dest),
    ]


def run_command(ring: Ring, manifest: dict, folder: str) -> str:
    """How to run an exported program in `folder`: its own command, with the interpreter
    the ring ran it with in place of `python`."""
    argv = shlex.split((manifest.get("run") or {}).get("command") or "python run.py --seed 0")
    if argv and argv[0] in ("python", "python3") and ring.program_python:
        argv[0] = ring.program_python
    # The program writes into the output folder; it does not make it.
    return (
        f"mkdir -p {PREDICTIONS} && cd {shlex.quote(folder)} && RINGFLOW_INPUT_DIR={INPUTS} "
        f"RINGFLOW_OUTPUT_DIR={PREDICTIONS} RINGFLOW_SEED=0 {shlex.join(argv)}"
    )


def decision_lines(ring: Ring, layout: RingLayout) -> list[str]:
    """The decision first: what final/ holds, why, and how much better it is."""
    if not layout.decision.exists():
        return ["final decision: not made yet (the ring is running, or stopped before it)"]
    decision = read_json(layout.decision)
    kind, chosen, base = decision["decision"], decision.get("chosen"), decision.get("baseline")
    side = decision.get("guard_against") or "baseline"
    ref = decision.get("reference", base)
    incumbent = decision.get("incumbent") or {}
    came_from = incumbent.get("chosen_in")
    if (known_as := chosen_as(incumbent)) is not None:
        came_from = f"{came_from}, as {known_as}"
    if kind == "candidate":
        beat = f"it beat the {side} {ref}" if ref else "there is no baseline to beat"
        lines = [f"final decision: candidate -> {chosen}: final/ holds it; {beat}"]
    elif kind == "baseline":
        lines = [f"final decision: baseline -> {chosen}: final/ keeps the baseline; no "
                 "finalist was surely better"]  # fmt: skip
    elif kind == "incumbent":
        lines = [f"final decision: incumbent -> {chosen}: final/ keeps the chain's incumbent "
                 f"(chosen in ring {came_from}); no finalist was surely better"]  # fmt: skip
    else:
        lines = [f"final decision: {kind}: nothing was written to final/"]
    guard = decision.get("guard") or {}
    if kind != "candidate" or guard.get("lcb") is None:
        lines.append(f"  why: {_short_reason(decision, side)}")
    if guard.get("lcb") is not None:
        seeds = guard.get("seeds") or []
        views = ", ".join(guard.get("views") or []) or "the search views"
        confidence = 100 * (1 - float(guard["alpha"]))
        maximize = ring.task.direction == "maximize"
        lcb = float(guard["lcb"])
        # In words, both in the task's direction: a bound below zero reads as how much
        # worse it may be, not as "-0.03 better", and a mean as which way it went.
        bound = f"{'at least' if lcb >= 0 else 'at worst'} {advantage(lcb, maximize)}"
        mean = guard.get("mean")
        mean = f"{advantage(mean, maximize)} on average, " if mean is not None else ""
        if kind == "candidate":
            what = "how much better"
        else:  # nothing replaced what final/ holds: the guard shown is the closest finalist's
            what = f"closest finalist, {guarded_candidate(decision)}, against the {side} {ref}"
        lines.append(
            f"  {what}: {mean}{bound} with "
            f"{confidence:.1f}% confidence (guard: {len(seeds)} fresh seeds on view(s) {views}; "
            f"it needed more than {guard.get('margin', 0)})"
        )
    final_view = decision.get("final_view") or {}
    if final_view.get("chosen") is not None:
        line = f"  on the final view {final_view.get('view')}: {chosen} {final_view['chosen']:.4f}"
        if final_view.get("reference") is not None and ref not in (chosen, base):
            line += f", {side} {final_view['reference']:.4f}"
        if final_view.get("baseline") is not None and chosen != base:
            line += f", baseline {final_view['baseline']:.4f}"
        lines.append(line)
    if kind in ("candidate", "baseline", "incumbent"):
        lines += deploy_lines(ring, layout)
    return lines


def guarded_against_lines(ring: Ring, decision: dict) -> list[str]:
    """In a chain: what the finalists were guarded against (guard.against), and the
    chain's incumbent ring by ring (docs/guard.md#the-incumbent)."""
    if not ring.continue_from or decision.get("decision") in ("refused", "none"):
        return []
    from ..selection.incumbent import against, history
    from .headline import history_line

    side = decision.get("guard_against") or "baseline"
    reference = decision.get("reference", decision.get("baseline"))
    lines = []
    if reference and ring.config.guard.enabled:
        lines.append(f"  guarded against: the {side} {reference} (guard.against: "
                     f"{against(ring)})")  # fmt: skip
        incumbent = decision.get("incumbent") or {}
        if incumbent.get("warning"):
            lines[0] += "; " + incumbent["warning"].removeprefix("guard.against: baseline: ")
    lines.append("  the chain's incumbent: " + "; ".join(
        history_line(row) for row in history(ring.ring_dir)))  # fmt: skip
    return lines


def stop_lines(layout: RingLayout) -> list[str]:
    """Why the ring stopped early, if it did (the way on: docs/recovery.md)."""
    from ..core.recovery import existing_continuation, stop_cause
    from ..core.stop import stopped_reason

    reason = stopped_reason(layout.root)
    if reason is None:
        return []
    lines = [f"the ring stopped ({stop_cause(layout.root)} failure, not a candidate's): {reason}"]
    if (later := existing_continuation(layout.root)) is not None:
        lines.append(f"  the ring {later[0]} continues this one: {layout.root.parent / later[0]}")
    else:
        lines.append(
            "  the way on: run this ring's Snakemake command again; it changes nothing and "
            "prints the command that continues the work (docs/recovery.md)"
        )
    return lines


def chain_lines(ring: Ring) -> list[str]:
    """A continuation: the ring it continues and every key that differs from it."""
    chain = ring.chain
    if not chain:
        return []
    changed = chain.get("changed") or {}
    lines = [f"continues ring {chain['continues']} ({chain['parent_dir']}); "
             + (f"{len(changed)} key(s) differ from it:" if changed else "no key differs "
                "from it")]  # fmt: skip
    for key, values in sorted(changed.items()):
        lines.append(f"  {key}: {values.get('parent')!r} -> {values.get('this')!r}")
    return lines


def render_summary(ring_dir) -> str:
    ring = load_ring(ring_dir)
    layout = RingLayout(Path(ring.ring_dir))
    index = read_json(layout.nodes_index) if layout.nodes_index.exists() else {"nodes": []}
    ranking = read_json(layout.ranking) if layout.ranking.exists() else {"ranked": []}
    three_seed = {row["node"]: row["score"] for row in ranking["ranked"]}
    better = "higher" if ring.task.direction == "maximize" else "lower"
    digest = failure_digest(layout.root, index["nodes"])
    lines = [
        f"ring {ring.ring_id}  task {ring.task.name} ({ring.task.direction}): "
        f"{better} scores are better",
        *decision_lines(ring, layout),
        *stop_lines(layout),
        *chain_lines(ring),
        *(
            guarded_against_lines(ring, read_json(layout.decision))
            if layout.decision.exists()
            else []
        ),
        # What the guard judged and who was passed over: after why it stopped and what a
        # continuation changed, which a user must see first.
        *(decision_detail_lines(read_json(layout.decision)) if layout.decision.exists() else []),
        "",
        f"  folder   {layout.root}"
        + ("" if layout.final_dir.exists() else "  (final/ not written)"),
        f"  report   {layout.report}",
        "",
        f"{'node':<22} {'origin':<10} {'what happened':<22} {'runs ok':>8} {'scored':>8} "
        f"{'seed-0':>8} {'3-seed':>8}",
    ]
    runs = list(executions(layout))
    unranked = []
    for node in index["nodes"]:
        ready = node["status"] == statuses.READY
        s0 = node_mean(ring, layout, node["id"], "s0")["mean"] if ready else None
        if s0 is None:
            unranked.append(node["id"])
        mine = [(n, v, var, r) for n, v, var, r in runs if n == node["id"]]
        ok = f"{sum(r.status == 'ok' for *_, r in mine)}/{len(mine)}"
        scored = f"{sum(_valid(layout, n, v, var) for n, v, var, _ in mine)}/{len(mine)}"
        happened = node_happened(node, [r for *_, r in mine],
                                 [f for f in digest if f.node == node["id"]])  # fmt: skip
        lines.append(
            f"{node['id']:<22} {origin_label(layout, node):<10} {happened:<22} "
            f"{ok:>8} {scored:>8} {_fmt(s0):>8} {_fmt(three_seed.get(node['id'])):>8}"
        )
    modes = Counter(_weights_kind(r) for *_, r in runs)
    order = [*WEIGHTS_WORDS, *sorted(set(modes) - set(WEIGHTS_WORDS))]
    counts = Counter(r.status for *_, r in runs)
    # An ok run is one whose program ended without an error; its output may still be invalid.
    unscored = sum(r.status == statuses.OK and not _valid(layout, n, v, var)
                   for n, v, var, r in runs)  # fmt: skip
    said = {k: f"{v} {HAPPENED.get(k, k)}" for k, v in sorted(counts.items())}
    if unscored:
        said[statuses.OK] += f" ({unscored} of them without a valid score)"
    lines += [
        *edited_folder_lines(layout, index["nodes"]),
        "",
        "runs: " + ", ".join(said.values()),
        "weights: " + "; ".join(f"{modes[k]} {WEIGHTS_WORDS.get(k, k)}" for k in order if modes[k]),
        *own_session_lines(runs),
        *session_lines(layout, index["nodes"]),
        *resume_lines(layout),
        *progress_lines(ring_progress(ring, layout), frozenset(unranked)),
        *carryover_lines(layout, index["nodes"]),
        "",
        *digest_lines(digest),
        "",
        GLOSSARY,
    ]
    # Reasons quote what programs wrote: no escape sequence reaches a terminal.
    return printable("\n".join(lines), keep_newlines=True) + "\n"


def _short_reason(decision: dict, side: str) -> str:
    """The decision's reason, unless it only strings together the finalists' own reasons,
    which the `passed over` lines below give one by one: then where to read them."""
    reason = decision.get("reason", "")
    judged = [p for p in decision.get("passed_over") or [] if p.get("outcome") != "not_reached"]
    listed = "; ".join(f"{p['node']}: {p['reason']}" for p in judged)
    if judged and reason == f"{side} kept: {listed}":
        return f"{side} kept; each finalist's reason is under `passed over` below"
    return reason


def decision_detail_lines(decision: dict) -> list[str]:
    """What the guard judged, every finalist passed over and why, and the warnings."""
    lines = []
    judged = decision.get("guard_judged")
    if judged:
        covered = [k.replace("_", " ") for k in ("program_noise", "rows", "training_luck")
                   if judged.get(k)]  # fmt: skip
        lines.append(f"  the guard judged: {', '.join(covered)}")
    detectable = ((decision.get("guard") or {}).get("bootstrap") or {}).get("detectable")
    before = decision.get("power_before") or {}
    if detectable is not None or before:
        measured = "not measured" if detectable is None else f"{detectable:.4g}"
        line = f"  smallest advantage this guard could detect: {measured}"
        if before.get("detectable") is not None:
            line += (f" (estimated before the guard from the baseline's probe runs: "
                     f"{before['detectable']:.4g})")  # fmt: skip
        elif before.get("reason"):
            line += f" (estimated before the guard: {before['reason']})"
        lines.append(line)
    for item in decision.get("passed_over") or []:
        lines.append(f"  passed over: {item['node']} (rank {item['rank']}, "
                     f"{item['outcome'].replace('_', ' ')}): {item['reason']}")  # fmt: skip
    for warning in decision.get("warnings") or []:
        lines.append(f"  warning: {warning}")
    return lines
