"""The failure digest: for each node that was rejected, crashed, was invalid or was not
scored, the first line of why (docs/report.md). Summary, status and report all show it, so a
failure is never only inside a score.json or a stderr.log.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..core import statuses
from ..core.frozen import Frozen, frozen_record
from ..core.layout import RingLayout
from ..core.node_state import ExecutionResult, node_if_any, result_if_any
from ..core.safetext import log_lines, printable
from ..core.statuses import REJECTED

INVALID = "invalid"
NOT_SCORED = "not scored"
TAIL_BYTES = 8192
LINE_CHARS = 300


@frozen_record
class Failure(Frozen):
    node: str
    # rejected, crash, hung, timeout, interrupted, invalid, not scored, or "scorer failed" /
    # "validator failed" (the task's own program failed on the output: not the node's fault)
    kind: str
    count: int  # executions with this kind of failure (1 for a rejection)
    example: str  # "view/variant" of the first one ("" for a rejection)
    reason: str  # first line of the reason
    # How many of the others failed for another reason than the first, each in its own
    # nodes/<node>/exec/<view>/<variant>/ (result.json, stderr.log): a line per reason would
    # grow with the seeds, since a reason often names one.
    other_reasons: int = 0

    def line(self) -> str:
        where = f" ({self.count}x, e.g. {self.example})" if self.example else ""
        line = f"{self.node}: {self.kind}{where}: {self.reason}"
        if self.other_reasons:
            n = self.other_reasons
            runs = "run" if n == 1 else "runs"
            line += f" [+{n} {runs} with other reasons: nodes/{self.node}/exec/]"
        return line


def first_line(text: str | None) -> str:
    for line in (text or "").strip().splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""


def last_line(path: Path) -> str:
    """The last non-empty line of a log (read from its tail only), escaped and cut to
    LINE_CHARS: a program writes its own stderr, escape sequences and all, and every
    caller shows the line to a user (docs/limits.md#text-shown-to-the-user)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - TAIL_BYTES))
            lines = log_lines(handle.read())
    except OSError:
        return ""
    return printable(lines[-1])[:LINE_CHARS] if lines else ""


# What ringflow's own refusals and stops look like inside Snakemake's log: a traceback of an
# input function, or a failed job's stderr (`ringflow: error: ...`, `ringflow: ring ...`).
ERROR_LINE = re.compile(
    r"^ringflow: (?:error: )?(.+)$|\b(?:InputError|MachineryError|SandboxError|RingflowError): "
    r"(.+)$",
    re.MULTILINE,
)


def key_error_line(log: Path) -> str:
    """The first line of ringflow's own error in a Snakemake log, or "". A first line that
    ends in a colon ("... has changed since:") gets the line after it, which names the
    cause."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return ""
    match = ERROR_LINE.search(text)
    if not match:
        return ""
    line = (match.group(1) or match.group(2)).strip()
    if line.endswith(":"):
        following = text[match.end() :].strip().split("\n", 1)[0].strip()
        line = f"{line} {following}".rstrip()
    return line[:400]


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return None


def execution_failure(exec_dir: Path, result: ExecutionResult | None, score: dict | None):
    """(kind, reason) of one finished execution, or None when it ran and was scored valid."""
    if result is None:
        return None
    status = result.status
    if status != statuses.OK:
        if status == statuses.INTERRUPTED and result.budget_cut:
            return None  # cut by the ring's own clock: not the program's failure
        reason = first_line(result.reason)
        tail = last_line(exec_dir / "stderr.log") if status == statuses.CRASH else ""
        if tail and tail not in reason:
            reason = f"{reason}; stderr: {tail}" if reason else f"stderr: {tail}"
        return status, reason or "no reason recorded"
    if score is None:
        return None
    if score.get("budget_cut"):
        return None
    if score.get("evaluator_failed"):
        # The task's own program failed on this output: the task's fault, not the program's.
        which = score["evaluator_failed"]
        return f"{which} failed", first_line(score.get("reason")) or f"the {which} failed"
    if not score.get("valid") and (score.get("scored") or score.get("reason")):
        # Invalid output has no score (a pointer, the validator's or the scorer's verdict,
        # or the scorer failing on it): it is the execution's failure, with its reason.
        return INVALID, first_line(score.get("reason")) or "the scorer gave no reason"
    if not score.get("scored"):
        return NOT_SCORED, first_line(score.get("reason")) or "no reason recorded"
    return None


def failure_digest(ring_root: str | Path, nodes: list[dict] | None = None) -> list[Failure]:
    """Failures per node and kind, in node order; `nodes` as in nodes/index.json."""
    root = Path(ring_root)
    layout = RingLayout(root)
    if nodes is None:
        index = _read(layout.nodes_index) or {}
        nodes = index.get("nodes", [])
    digest: list[Failure] = []
    for node in nodes:
        node_id = node.get("id")
        if node.get("status") == REJECTED:
            record = node_if_any(layout.node_json(node_id))
            error = record.error if record is not None else None
            reason = first_line(error or node.get("error")) or "no reason recorded"
            digest.append(Failure(node_id, REJECTED, 1, "", reason))
            continue
        found: dict[str, list] = {}
        for *_, exec_dir in layout.executions(node_id):
            failure = execution_failure(
                exec_dir, result_if_any(exec_dir / "result.json"), _read(exec_dir / "score.json")
            )
            if failure is not None:
                found.setdefault(failure[0], []).append(
                    (f"{exec_dir.parent.name}/{exec_dir.name}", failure[1])
                )
        for kind, items in found.items():
            first = items[0][1]
            others = sum(reason != first for _, reason in items)
            digest.append(Failure(node_id, kind, len(items), items[0][0], first, others))
    return digest


def digest_lines(digest: list[Failure]) -> list[str]:
    if not digest:
        return ["failures: none"]
    return ["failures:", *(f"  {printable(f.line())}" for f in digest)]
