"""The `ringflow` command: what people run (status, report, verify, key --explain) and the
internal steps that the workflow's rules call."""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from pathlib import Path

from .core.errors import MachineryError, RingflowError


def _ring(args) -> Path:
    return Path(args.ring_dir)


def _layout(args):
    from .core.layout import RingLayout

    return RingLayout(Path(args.ring_dir))


def _declared(args, expected: Path, option: str = "out") -> None:
    """A step writes the file its rule declares (given with --out), the layout's path for
    that record; any other path is a rule that drifted from the layout."""
    given = getattr(args, option, None)
    if given is not None and Path(given).resolve() != Path(expected).resolve():
        raise RingflowError(
            f"the rule declares {given} as this step's output, but the step writes {expected}"
        )


def cmd_lock_ring(args) -> int:
    """Lock the ring: RING.json, the view manifests and the live cutoff
    (docs/ring-folder.md#the-lock-and-the-clock). A refusal (no sandbox, an interpreter that
    does not run, a bad task) says why, in the step's log and on its stderr."""
    from .config import config_defaults, with_changes
    from .ring.chain import inherit_config
    from .ring.lock import lock_ring

    _declared(args, _layout(args).ring_json)
    with open(args.log, "w") as log:
        try:
            # The ring's own configuration (its module's), as changes to the defaults. A
            # ring of a chain read before its parent was locked takes the parent's
            # configuration now; inheriting is idempotent.
            defaults = config_defaults(args.defaults)
            config = with_changes(defaults, json.loads(args.config))
            inherit_config(config, defaults)
            ring = lock_ring(config)
        except RingflowError as exc:
            for stream in (log, sys.stderr):
                print(f"ringflow: {exc}", file=stream)
            return 1
        print(f"ring {ring.ring_id} locked at {ring.ring_dir}", file=log)
    return 0


def cmd_import_nodes(args) -> int:
    from .core.clock import load_ring
    from .nodes import import_static

    _declared(args, _layout(args).nodes_static)
    index = import_static(load_ring(args.ring_dir))
    for node in index["nodes"]:
        print(f"{node['id']:<24} {node['role']:<10} {node['status']}")
    return 0


def cmd_execute(args) -> int:
    from .core.interrupts import EXIT_INTERRUPTED, interrupted_with_ring, stopped_by_signal
    from .execute import run_execution
    from .scoring import score_execution
    from .supervisor.held_signals import held_signals

    started = time.time()
    layout = _layout(args)
    _declared(args, layout.result(args.node, args.view, args.variant), "result")
    _declared(args, layout.score(args.node, args.view, args.variant), "score")
    # A signal stops the program's run; outside it, it waits until both records are written.
    with held_signals():
        result = run_execution(args.ring_dir, args.node, args.view, args.variant, gpus=args.gpus)
        said = {"status": result.status, "budget_cut": result.budget_cut,
                "weights_mode": result.weights_mode, "reason": result.reason}  # fmt: skip
        print(json.dumps(said))
        try:
            score = score_execution(args.ring_dir, args.node, args.view, args.variant)
        except MachineryError as stopped:
            if not _recorded(layout, args):
                raise
            # The ring stopped on what this run's scoring showed (the task's scorer failed
            # on the baseline or on too many nodes): the records it stopped on stay, for
            # `verify` and the summary; no other step runs in a stopped ring (main).
            print(f"ringflow: error: {stopped}", file=sys.stderr)
            return 0
    print(json.dumps({k: score.get(k) for k in ("score", "valid", "reason")}))
    if stopped_by_signal(result):
        # Runs again when the ring runs again (docs/operations.md#recovery-after-a-stop).
        print(f"ringflow: execution interrupted: {result.reason}", file=sys.stderr)
        if not interrupted_with_ring(layout.root, result, started):
            return EXIT_INTERRUPTED  # the ring goes on: it stops here instead
    return 0


def _recorded(layout, args) -> bool:
    """Whether the execution's result and score are both written."""
    return all(
        path.is_file()
        for path in (
            layout.result(args.node, args.view, args.variant),
            layout.score(args.node, args.view, args.variant),
        )
    )


def cmd_score(args) -> int:
    from .scoring import score_execution

    print(json.dumps(score_execution(args.ring_dir, args.node, args.view, args.variant)))
    return 0


def cmd_key_target(args) -> int:
    from .weights.keytarget import write_key_target

    _declared(args, _layout(args).key_target(args.key))
    print(json.dumps(write_key_target(args.ring_dir, args.key)))
    return 0


def cmd_search_summary(args) -> int:
    from .reporting.summary import write_search_summary

    _declared(args, _layout(args).search)
    write_search_summary(args.ring_dir)
    return 0


def cmd_plan_generation(args) -> int:
    from .search.plan import plan_generation

    _declared(args, _layout(args).generation(args.generation))
    plan = plan_generation(args.ring_dir, args.generation)
    print(json.dumps({k: plan[k] for k in ("generation", "last", "reason", "nodes")}))
    return 0


def cmd_settle_generation(args) -> int:
    from .search.plan import settle_generation

    _declared(args, _layout(args).settled(args.generation))
    print(json.dumps(settle_generation(args.ring_dir, args.generation)))
    return 0


def cmd_search_loop(args) -> int:
    from .search.plan import write_loop_summary

    _declared(args, _layout(args).search_loop)
    write_loop_summary(args.ring_dir)
    return 0


def cmd_engineer(args) -> int:
    from .search.session import run_session

    _declared(args, _layout(args).session(args.node))
    record = run_session(args.ring_dir, args.node)
    print(json.dumps({k: record.get(k) for k in ("node", "status", "node_status", "reason")}))
    return 0


def cmd_query_score(args) -> int:
    from .search.query_client import main as query_main

    return query_main([args.pred_dir, *(["--socket", args.socket] if args.socket else [])])


def cmd_promote(args) -> int:
    from .selection.promote import promote

    _declared(args, _layout(args).promotion)
    print(json.dumps(promote(args.ring_dir)["promoted"]))
    return 0


def cmd_rank(args) -> int:
    from .selection.promote import rank

    _declared(args, _layout(args).ranking)
    print(json.dumps(rank(args.ring_dir)["finalists"]))
    return 0


def cmd_seat_baseline(args) -> int:
    from .selection.final import seat_baseline

    _declared(args, _layout(args).seated)
    print(json.dumps(seat_baseline(args.ring_dir)))
    return 0


def cmd_power(args) -> int:
    from .selection.power import ring_power

    _declared(args, _layout(args).power)
    print(json.dumps(ring_power(args.ring_dir)))
    return 0


def cmd_screen(args) -> int:
    from .selection.final import screen

    _declared(args, _layout(args).screen(args.node))
    print(json.dumps(screen(args.ring_dir, args.node)))
    return 0


def cmd_review(args) -> int:
    from .selection.final import review

    _declared(args, _layout(args).review(args.node))
    print(json.dumps(review(args.ring_dir, args.node)))
    return 0


def cmd_verdict(args) -> int:
    from .selection.final import verdict

    _declared(args, _layout(args).verdict(args.rank))
    print(json.dumps(verdict(args.ring_dir, args.rank)))
    return 0


def cmd_decide(args) -> int:
    from .selection.final import decide

    _declared(args, _layout(args).decision)
    record = decide(args.ring_dir)
    print(json.dumps({k: record.get(k) for k in ("decision", "chosen", "reason")}))
    return 0


def cmd_repro(args) -> int:
    from .selection.final import repro

    _declared(args, _layout(args).repro_record)
    print(json.dumps(repro(args.ring_dir)))
    return 0


def cmd_reserve(args) -> int:
    from .selection.timekeeper import render_breakdown, tick

    result = tick(args.ring_dir)
    if args.json:
        print(json.dumps(result))
    elif "terms" not in result:
        print(f"{args.ring_dir}: {result['reason']}")
    else:
        print(render_breakdown(result))
    return 0


def cmd_summary(args) -> int:
    from .core.jsonio import atomic_write_text
    from .reporting.summary import render_summary

    text = render_summary(args.ring_dir)
    if args.write:
        atomic_write_text(args.write, text)
    print(text)
    return 0


def cmd_step_summary(args) -> int:
    from .core.jsonio import atomic_write_text
    from .reporting.summary import render_summary

    layout = _layout(args)
    _declared(args, layout.summary)
    atomic_write_text(layout.summary, render_summary(args.ring_dir))
    return 0


def cmd_step_report(args) -> int:
    from .reporting.chain_report import write_chain_of_continuation
    from .reporting.report import write_report

    layout = _layout(args)
    _declared(args, layout.report)
    print(f"report written to {write_report(args.ring_dir, layout.report)}")
    # A continuation's chain page is a private record, not an output of the rule: it reads
    # the earlier rings, and a finished ring is never run again to write it
    # (docs/report.md#the-chain-page).
    chain = write_chain_of_continuation(args.ring_dir)
    if chain is not None:
        print(f"chain page written to {chain}")
    return 0


def cmd_report(args) -> int:
    from .core.clock import load_ring
    from .reporting.chain_report import write_chain
    from .reporting.report import write_report

    if args.chain:
        out = write_chain(args.ring_dir, args.out)
        print(f"chain page written to {out}")
        return 0
    out = write_report(args.ring_dir, args.out)
    print(f"report written to {out}")
    if load_ring(args.ring_dir).continue_from:
        # A continuation's report comes with the page of its whole chain, in its folder.
        print(f"chain page written to {write_chain(args.ring_dir)}")
    return 0


def cmd_digest(args) -> int:
    from .core.clock import load_ring
    from .reporting.health_digest import ring_digest
    from .reporting.notify import notify

    if not args.send:
        print(ring_digest(args.ring_dir)["text"], end="")
        return 0
    lines = notify(args.ring_dir, load_ring(args.ring_dir).config.notify, "sent by hand")
    for line in lines:
        print(f"{line['channel']}: " + (f"sent to {line['to']}" if line["ok"] else line["error"]))
    if not lines:
        print("no channel configured (notify.email, notify.webhook); digest.txt written")
    return 1 if any(not line["ok"] for line in lines) else 0


def cmd_status(args) -> int:
    from .reporting.status import render_status

    print(render_status(args.ring_dir))
    return 0


def cmd_verify(args) -> int:
    from .verify import verify_ring

    problems = verify_ring(args.ring_dir)
    if problems:
        print(f"{args.ring_dir}: {len(problems)} problem(s)")
        for problem in problems:
            print(f"- {problem}")
        return 1
    print(f"{args.ring_dir}: ledger, registered objects, inputs and ancestors' ledgers verify")
    return 0


def cmd_key(args) -> int:
    from .core.clock import load_node, load_ring
    from .weights.keys import explain

    ring = load_ring(args.ring_dir)
    executions = load_node(ring, args.node).executions or {}
    if args.view not in executions or args.variant not in executions[args.view]:
        known = ", ".join(f"{v}/{x}" for v in executions for x in executions[v]) or "none"
        raise RingflowError(
            f"{args.node} has no execution {args.view}/{args.variant} (it has: {known})"
        )
    spec = executions[args.view][args.variant]
    if not spec.get("key"):
        print(
            f"{args.node} {args.view}/{args.variant}: no weights key "
            f"(weights mode {spec['weights']})"
        )
        return 0
    if args.explain:
        print(explain(spec["key"], spec["key_components"], ring.environment))
    else:
        print(spec["key"])
    return 0


def cmd_store(args) -> int:
    from .core.clock import load_ring
    from .core.ledger import Ledger
    from .weights.heal import check_store, missing_store, repair_store, rings_of_store
    from .weights.store import WeightsStore

    ring = load_ring(args.ring_dir)
    if args.action == "check" and missing_store(ring):
        # A check must not create the store it looks for (a repair rebuilds it).
        raise RingflowError(missing_store(ring))
    store = WeightsStore(ring.store)
    report = check_store(store, rings_of_store(ring))
    print(f"store {store.root}:")
    print("\n".join(report.lines()))
    if args.action == "check":
        return 1 if report.problems else 0
    done = repair_store(store, report, Ledger(ring.layout.ledger))
    for record in done["restored"]:
        print(f"restored the index entry of key {record['key']} from the store's anchors")
    for record in done["quarantined"]:
        print(f"quarantined key {record['key']} -> {record['quarantine']}")
    for who in done["retrain"]:
        print(
            f"key {who['key']} must be trained again (registered by ring {who.get('ring')}, "
            f"node {who.get('node')}, {who.get('execution')}): the next ring that runs it "
            "trains it once"
        )
    for path in done["removed"]:
        print(f"removed leftover {path}")
    for key in done["busy"]:
        print(f"key {key} is being trained or replayed; run the repair again later")
    for path in done["in_use"]:
        print(f"kept {path}: a registration still writes it")
    left = check_store(store, rings_of_store(ring)).problems
    print("store repaired" if not left else f"{len(left)} problem(s) left")
    return 1 if left else 0


def cmd_ledger_repair(args) -> int:
    from .core.clock import load_ring
    from .core.ledger import Ledger, emit_event

    ring = load_ring(args.ring_dir)
    ledger = Ledger(ring.layout.ledger)
    done = ledger.repair()
    if done is None:
        print(f"{ledger.path}: the chain verifies; nothing to repair")
        return 0
    emit_event(ring.ring_dir, "ledger_repaired", **done)
    if done["action"] == "cut":
        print(f"{ledger.path}: cut the torn line {done['line']} ({done['bytes']} bytes, kept "
              f"in {done['kept_in']})")  # fmt: skip
    else:
        print(f"{ledger.path}: line {done['line']} was whole; added its newline")
    return 0


FINAL_ROLES = {
    "candidate": "the chosen candidate",
    "baseline": "the baseline, kept",
    "incumbent": "the chain's incumbent, kept",
}


def final_role(ring_dir) -> str:
    """What final/ holds, in the words the summary uses: a candidate chosen in this ring,
    the baseline kept, or the chain's incumbent kept."""
    from .core.jsonio import read_json
    from .core.layout import RingLayout

    decision = read_json(RingLayout(Path(ring_dir)).final_dir / "FINAL.json").get("decision")
    return FINAL_ROLES.get(decision, str(decision))


def cmd_export(args) -> int:
    from .core.clock import load_ring
    from .reporting.summary import run_command
    from .selection.deploy import export

    manifest = export(args.ring_dir, args.dest)
    held = final_role(args.ring_dir)
    print(f"{args.dest}: {manifest['node']} ({held}), weights and MANIFEST.json")
    print(f"run it: {run_command(load_ring(args.ring_dir), manifest, args.dest)}")
    return 0


def cmd_package(args) -> int:
    from .carryover.package import package

    if args.dest and args.out and args.dest != args.out:
        raise SystemExit(f"ringflow package: error: two folders given ({args.dest}, --out "
                         f"{args.out}): give one")  # fmt: skip
    manifest = package(args.ring_dir, args.dest or args.out)
    held = final_role(args.ring_dir)
    print(f"packaged {manifest['ring_id']}: {manifest['chosen']} ({held}) "
          f"with {len(manifest['lineage_segments'])} lineage segment(s)")  # fmt: skip
    for segment in manifest["lineage_segments"]:
        print(f"  {segment['path']}: {segment['identity']} sealed {segment['seal_sha256'][:12]}")
    return 0


def cmd_check(args) -> int:
    from .precheck import check

    report = check(
        args.task,
        args.candidates,
        run=not args.no_run,
        baseline=args.baseline,
        profile=args.profile,
        configfile=args.configfile,
        echo=sys.stdout,  # line by line: a run that takes its time shows what it waits for
    )
    print(f"\n{report.verdict()}")
    return 1 if report.failed else 0


def cmd_import_carryover(args) -> int:
    from .carryover.importing import import_carryover

    _declared(args, _layout(args).carryover_imported)
    done = import_carryover(args.ring_dir)
    for item in done["rejected"]:
        print(f"carryover_rejected {item['identity']}: {item['reason']}")
    print(json.dumps({k: done[k] for k in ("queue", "waiting", "already_resumed")}))
    return 0


def cmd_seal(args) -> int:
    from .carryover.executions import seal_ring

    _declared(args, _layout(args).carryover_seals)
    done = seal_ring(args.ring_dir)
    for sealed, refused, label in (("seals", "refused", ""), ("evidence", "evidence_refused",
                                   "evidence ")):  # fmt: skip
        for seal in done[sealed]:
            kind = "evidence only" if label else seal["kind"]
            print(f"sealed {seal['identity']} ({kind}): {seal['seal_sha256']}")
        for item in done[refused]:
            print(f"{label}not sealed {item['node']}: {item['reason']}")
    return 0


def cmd_stop_manifest(args) -> int:
    from .carryover.manifest import write_stop_manifest

    _declared(args, _layout(args).stop_manifest)
    manifest = write_stop_manifest(args.ring_dir)
    print(json.dumps({k: manifest[k] for k in ("ring_id", "ledger_head")}))
    return 0


def cmd_taint(args) -> int:
    from .ring.ancestry import taint

    taint(args.ring_dir, args.why)
    print(f"{args.ring_dir}: marked tainted; no ring will continue from it or its descendants")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ringflow", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name, func, help_text, *extra, aliases=()):
        p = sub.add_parser(name, help=help_text, aliases=list(aliases))
        p.add_argument("ring_dir", help="the ring folder, e.g. runs/demo")
        for args, kwargs in extra:
            p.add_argument(*args, **kwargs)
        p.set_defaults(func=func)
        return p

    execution = ([("node",), {}], [("view",), {}], [("variant",), {}])
    check = sub.add_parser(
        "check", help="check a task and candidates before a ring: import checks, scorer, one run"
    )
    check.add_argument("task", help="the task folder (task.yaml, views/)")
    check.add_argument(
        "candidates", nargs="*", help="candidate folders, or folders of candidate folders"
    )
    check.add_argument("--no-run", action="store_true", help="do not run a candidate")
    check.add_argument(
        "--baseline",
        help="the baseline's folder: it runs once (its output probes the scorer), then on the "
        "guard view under probe seeds, to say the smallest advantage the guard could detect",
    )
    check.add_argument(
        "--profile",
        help="a Snakemake profile, e.g. profiles/slurm: with the SLURM executor, check that a "
        "node of its partition can run the executions (docs/slurm.md)",
    )
    check.add_argument(
        "--configfile",
        help="the ring's configuration file (e.g. config/quick.yaml): the check's runs use "
        "its limits, and with --profile they are checked against the partition",
    )
    check.set_defaults(func=cmd_check)
    add("status", cmd_status, "live table of nodes, in-flight executions, cutoff and reserve")
    add(
        "report",
        cmd_report,
        "write the ring's HTML report",
        (
            ("--out",),
            {
                "help": "output file (default RING_DIR/report.html, or "
                "RING_DIR/chain.html with --chain)"
            },
        ),
        (
            ("--chain",),
            {
                "action": "store_true",
                "help": "write the page of the whole chain "
                "ending at RING_DIR instead (a continuation's report writes it too)",
            },
        ),
    )
    add("digest", cmd_digest, "print the ring's digest (decision, failures, hung executions, "
        "time left)", (("--send",), {"action": "store_true", "help": "send it on the ring's "
                       "notify channels instead (and write digest.txt)"}),
        aliases=("health-digest",))  # fmt: skip
    add("verify", cmd_verify, "check the ledger chain, registered objects and ancestors")
    add(
        "key",
        cmd_key,
        "print an execution's weights key",
        *execution,
        (("--explain",), {"action": "store_true", "help": "print every component"}),
    )
    add(
        "summary",
        cmd_summary,
        "one-screen summary of the ring",
        (("--write",), {"help": "also write it to this file"}),
    )
    store = sub.add_parser("store", help="check or repair the ring's weights store")
    store.add_argument(
        "action", choices=("check", "repair"), help="check: list problems; repair: quarantine"
    )
    store.add_argument("ring_dir", help="a ring that uses the store, e.g. runs/demo")
    store.set_defaults(func=cmd_store)
    ledger = sub.add_parser("ledger", help="repair a ring's ledger")
    ledger.add_argument("action", choices=("repair",), help="cut a torn last line")
    ledger.add_argument("ring_dir", help="the ring folder, e.g. runs/demo")
    ledger.set_defaults(func=cmd_ledger_repair)
    add(
        "export",
        cmd_export,
        "write the final choice, code, weights and MANIFEST.json, to a new folder",
        (("dest",), {"help": "a folder that does not exist yet"}),
    )
    add(
        "package",
        cmd_package,
        "package the chosen result (final/) with the snapshots of its resumed lineage",
        (
            ("dest",),
            {"nargs": "?", "help": "a folder that does not exist yet (default RING_DIR/package)"},
        ),
        (("--out",), {"help": "the same as DEST"}),
    )
    add(
        "taint",
        cmd_taint,
        "mark a ring tainted: no ring continues from it (or from a ring after it)",
        (("--why",), {"required": True, "help": "the reason, shown to every refused ring"}),
    )
    add(
        "reserve",
        cmd_reserve,
        "re-estimate the final reserve once (may move the cutoff) and print its breakdown",
        (("--json",), {"action": "store_true", "help": "print the estimate as JSON"}),
    )
    add("score", cmd_score, "score one finished execution again",
        *([(name,), {}] for name in ("node", "view", "variant")))  # fmt: skip
    query = sub.add_parser("query-score", help="score predictions through an engineer "
                           "session's socket (native feedback; exit 3 when refused)")  # fmt: skip
    query.add_argument("pred_dir", help="folder of predictions, as a program writes them")
    query.add_argument("--socket", help="the session's socket (default $RINGFLOW_QUERY_SOCKET)")
    query.set_defaults(func=cmd_query_score)
    add_steps(sub.add_parser("step", help="the steps the workflow's rules run (not typed by "
                             "users)").add_subparsers(dest="step", required=True))  # fmt: skip
    return parser


def add_steps(sub, only: str | None = None) -> None:
    """`ringflow step NAME RING_DIR …`: what the rules run. `--out` is the file the rule
    declares; a step refuses to write any other (the layout names every path once).
    With `only`, just that step's parser (see step_parser)."""

    def add(name, func, help_text, *extra, outputs=("out",)):
        if only is not None and name != only:
            return
        p = sub.add_parser(name, help=help_text)
        p.add_argument("ring_dir", help="the ring folder, e.g. runs/demo")
        for args, kwargs in extra:
            p.add_argument(*args, **kwargs)
        for output in outputs:
            p.add_argument(f"--{output}", help="the file the rule declares")
        p.set_defaults(func=func)

    execution = ([("node",), {}], [("view",), {}], [("variant",), {}])
    gpus = (("--gpus",), {"type": int, "default": 0, "help": "GPUs to give the program"})
    generation = (("generation",), {"type": int})
    add("lock-ring", cmd_lock_ring, "lock the ring: RING.json, the views, the clock",
        (("--config",), {"required": True, "help": "the ring's configuration: its changes to "
                         "the defaults, as JSON (ringflow.config.config_changes)"}),
        (("--defaults",), {"required": True, "help": "config/config.yaml"}),
        (("--log",), {"required": True, "help": "the rule's log"}))  # fmt: skip
    add("import-nodes", cmd_import_nodes, "create the ring's nodes")
    add("import-carryover", cmd_import_carryover, "verify and import sealed work")
    add("plan-generation", cmd_plan_generation, "plan one generation of the search", generation)
    add("engineer", cmd_engineer, "run one node's engineer session and settle the node",
        (("node",), {}))  # fmt: skip
    add("settle-generation", cmd_settle_generation, "record how a generation's sessions ended",
        generation)  # fmt: skip
    add("search-loop", cmd_search_loop, "record the search loop's generations")
    add("execute", cmd_execute, "run one execution, then score it", *execution, gpus,
        outputs=("result", "score"))  # fmt: skip
    add("key-target", cmd_key_target, "write a weights key's target", (("key",), {}))
    add("search-summary", cmd_search_summary, "record the end of the search")
    add("seal", cmd_seal, "seal the work the cutoff cut off")
    add("promote", cmd_promote, "promote the top nodes by seed-0 score")
    add("rank", cmd_rank, "rank promoted nodes by the 3-seed mean")
    add("power", cmd_power, "estimate the guard's power from the baseline's probe runs")
    add("seat-baseline", cmd_seat_baseline, "write the baseline to final/ first")
    add("screen", cmd_screen, "the view-blind check's first screen", (("node",), {}))
    add("review", cmd_review, "review a finalist", (("node",), {}))
    add("verdict", cmd_verdict, "guard a finalist", (("rank",), {"type": int}))
    add("decide", cmd_decide, "make the final decision")
    add("repro", cmd_repro, "the reproduction check")
    add("summary", cmd_step_summary, "write the ring's summary.txt")
    add("report", cmd_step_report, "write the ring's report.html (a continuation's chain.html)")
    add("stop-manifest", cmd_stop_manifest, "write stop_manifest.json")


@functools.lru_cache(maxsize=64)
def step_parser(name: str | None = None) -> argparse.ArgumentParser:
    """`ringflow step …` alone: every execution is a step in a process of its own, and the
    whole command table cost it more than its own arguments. With `name`, the table holds
    that step alone when it is one (a rule's call); otherwise every step, for help and
    for the error that names the steps there are. Kept once built (parsing leaves a
    parser as it was), for the forks of a process that built it (prepare_step_parsers)."""
    parser = argparse.ArgumentParser(prog="ringflow step", description=add_steps.__doc__)
    sub = parser.add_subparsers(dest="step", required=True)
    add_steps(sub, only=name)
    if name is not None and not sub.choices:
        add_steps(sub)
    parser.set_defaults(command="step")
    return parser


def prepare_step_parsers() -> None:
    """Build every step's parser and parse one execution's call with it, in a process that
    forks steps (the resident step server, docs/architecture.md#resident-steps): each fork
    then finds its parser built and argparse's patterns compiled, where it would otherwise
    spend a tenth of an execution's own CPU on them."""
    steps = next(a for a in step_parser()._actions if a.dest == "step")
    for name in steps.choices:
        step_parser(name)
    step_parser("execute").parse_args(["execute", "RING", "NODE", "VIEW", "VARIANT", "--gpus",
                                       "0", "--result", "RESULT", "--score", "SCORE"])  # fmt: skip


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["step"]:
        return step_parser(argv[1] if len(argv) > 1 else None).parse_args(argv[1:])
    return build_parser().parse_args(argv)


# The commands that only read a ring: they may read one copied or moved since its lock
# (docs/ring-folder.md#the-lock-and-the-clock). Every step, and every other command on a
# ring, writes to it or to its store, and refuses a moved ring.
READING_COMMANDS = frozenset(
    {"status", "summary", "digest", "health-digest", "report", "verify", "key", "export", "package"}
)


def writes_to_ring(args) -> bool:
    """Whether the parsed command writes to the ring it names (or to the ring's store)."""
    if args.command == "store":
        return args.action != "check"
    if args.command in ("digest", "health-digest"):
        return bool(args.send)
    return args.command not in READING_COMMANDS


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    try:
        if getattr(args, "ring_dir", None) and writes_to_ring(args):
            from .core.clock import refuse_moved_ring

            refuse_moved_ring(args.ring_dir)
        if args.command == "step" and args.step != "lock-ring":
            from .core.stop import refuse_if_stopped

            refuse_if_stopped(args.ring_dir)  # nothing runs in a stopped ring
        return args.func(args)
    except RingflowError as exc:
        print(f"ringflow: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # A reader that stopped early (`ringflow status RING | head`): end as a program
        # killed by SIGPIPE does, without a traceback or a second error at exit's flush.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE
    except OSError as exc:
        from .core.diskspace import is_full_error

        if not is_full_error(exc):
            raise
        # Any step of a ring (scoring, ranking, sealing …) that meets a full disk stops
        # the ring for the machine's sake (docs/faults.md#disk-full).
        print(f"ringflow: error: {_stop_for_full_disk(args, exc)}", file=sys.stderr)
        return 2


def _stop_for_full_disk(args, exc: OSError) -> str:
    from .core.diskspace import full_message
    from .core.layout import RingLayout
    from .core.stop import stop_ring

    ring_dir = getattr(args, "ring_dir", None)
    where = exc.filename or ring_dir or os.getcwd()
    folder = Path(where)
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    reason = f"{full_message(str(where), folder)} (in `ringflow {args.command}`)"
    if ring_dir and RingLayout(Path(ring_dir)).ring_json.is_file():
        try:
            return str(stop_ring(ring_dir, reason, disk_full=str(where)))
        except OSError:
            pass  # too full even for the stop record: the message still says why
    return f"the ring stopped: {reason}"
