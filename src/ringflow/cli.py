"""The `ringflow` command: what people run (status, report, verify, key --explain) and the
internal steps that the workflow's rules call."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .errors import RingflowError


def _ring(args) -> Path:
    return Path(args.ring_dir)


def cmd_import_nodes(args) -> int:
    from .nodes import import_static
    from .ring.clock import load_ring

    index = import_static(load_ring(args.ring_dir))
    for node in index["nodes"]:
        print(f"{node['id']:<24} {node['role']:<10} {node['status']}")
    return 0


def cmd_execute(args) -> int:
    from .execute import run_execution
    from .scoring import score_execution

    result = run_execution(args.ring_dir, args.node, args.view, args.variant)
    print(json.dumps({k: result[k] for k in ("status", "budget_cut", "weights_mode", "reason")}))
    score = score_execution(args.ring_dir, args.node, args.view, args.variant)
    print(json.dumps({k: score.get(k) for k in ("score", "valid", "reason")}))
    return 0


def cmd_score(args) -> int:
    from .scoring import score_execution

    print(json.dumps(score_execution(args.ring_dir, args.node, args.view, args.variant)))
    return 0


def cmd_key_target(args) -> int:
    from .weights.keytarget import write_key_target

    print(json.dumps(write_key_target(args.ring_dir, args.key)))
    return 0


def cmd_search_summary(args) -> int:
    from .reporting.summary import write_search_summary

    write_search_summary(args.ring_dir)
    return 0


def cmd_promote(args) -> int:
    from .selection.promote import promote

    print(json.dumps(promote(args.ring_dir)["promoted"]))
    return 0


def cmd_rank(args) -> int:
    from .selection.promote import rank

    print(json.dumps(rank(args.ring_dir)["finalists"]))
    return 0


def cmd_seat_baseline(args) -> int:
    from .selection.final import seat_baseline

    print(json.dumps(seat_baseline(args.ring_dir)))
    return 0


def cmd_review(args) -> int:
    from .selection.final import review

    print(json.dumps(review(args.ring_dir, args.node)))
    return 0


def cmd_verdict(args) -> int:
    from .selection.final import verdict

    print(json.dumps(verdict(args.ring_dir, args.rank)))
    return 0


def cmd_decide(args) -> int:
    from .selection.final import decide

    record = decide(args.ring_dir)
    print(json.dumps({k: record.get(k) for k in ("decision", "chosen", "reason")}))
    return 0


def cmd_repro(args) -> int:
    from .selection.final import repro

    print(json.dumps(repro(args.ring_dir)))
    return 0


def cmd_reserve(args) -> int:
    from .timekeeper import render_breakdown, tick

    result = tick(args.ring_dir)
    if args.json:
        print(json.dumps(result))
    elif "terms" not in result:
        print(f"{args.ring_dir}: {result['reason']}")
    else:
        print(render_breakdown(result))
    return 0


def cmd_summary(args) -> int:
    from .jsonio import atomic_write_text
    from .reporting.summary import render_summary

    text = render_summary(args.ring_dir)
    if args.write:
        atomic_write_text(args.write, text)
    print(text)
    return 0


def cmd_report(args) -> int:
    from .reporting.report import write_report

    out = write_report(args.ring_dir, args.out)
    print(f"report written to {out}")
    return 0


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
    print(f"{args.ring_dir}: ledger, registered objects and ancestors verify")
    return 0


def cmd_key(args) -> int:
    from .ring.clock import load_node, load_ring
    from .weights.keys import explain

    ring = load_ring(args.ring_dir)
    spec = load_node(ring, args.node)["executions"][args.view][args.variant]
    if not spec.get("key"):
        print(
            f"{args.node} {args.view}/{args.variant}: no weights key "
            f"(weights mode {spec['weights']})"
        )
        return 0
    if args.explain:
        print(explain(spec["key"], spec["key_components"]))
    else:
        print(spec["key"])
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ringflow", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name, func, help_text, *extra):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("ring_dir", help="the ring folder, e.g. runs/demo")
        for args, kwargs in extra:
            p.add_argument(*args, **kwargs)
        p.set_defaults(func=func)
        return p

    execution = ([("node",), {}], [("view",), {}], [("variant",), {}])
    add("status", cmd_status, "live table of nodes, in-flight executions, cutoff and reserve")
    add(
        "report",
        cmd_report,
        "write the ring's HTML report",
        (("--out",), {"help": "output file (default RING_DIR/report.html)"}),
    )
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
    add(
        "reserve",
        cmd_reserve,
        "re-estimate the final reserve once (may move the cutoff) and print its breakdown",
        (("--json",), {"action": "store_true", "help": "print the estimate as JSON"}),
    )
    add("import-nodes", cmd_import_nodes, "(rule) create the ring's nodes")
    add("execute", cmd_execute, "(rule) run one execution, then score it", *execution)
    add("score", cmd_score, "score one finished execution again", *execution)
    add("key-target", cmd_key_target, "(rule) write a weights key's target", (("key",), {}))
    add("search-summary", cmd_search_summary, "(rule) record the end of the search")
    add("promote", cmd_promote, "(rule) promote the top nodes by seed-0 score")
    add("rank", cmd_rank, "(rule) rank promoted nodes by the 3-seed mean")
    add("seat-baseline", cmd_seat_baseline, "(rule) write the baseline to final/ first")
    add("review", cmd_review, "(rule) review a finalist", (("node",), {}))
    add("verdict", cmd_verdict, "(rule) guard a finalist", (("rank",), {"type": int}))
    add("decide", cmd_decide, "(rule) make the final decision")
    add("repro", cmd_repro, "(rule) the reproduction check")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except RingflowError as exc:
        print(f"ringflow: error: {exc}", file=sys.stderr)
        return 2
