"""Evidence of an engineer session cut at the hand-over point with a runnable program
(docs/operations.md#carryover): its submission is executed at once, as any node's; its snapshot is
sealed only as evidence, in `nodes/<id>/evidence/` (the seal transaction's `EVIDENCE` target).

The snapshot holds the submission as it was handed over (`solution/`), the engineer's
PLAN.json if it wrote one, the raw log (`trajectory/`, the values of `engineer.env_pass`
redacted) and HANDOFF.json, with the engineer kind's hand-over fields and `evidence: true`.
A session that left processes behind is never sealed. Evidence settles nothing (the node
stays as its execution leaves it, and may also be carried over if its run is cut by the
cutoff) and is never imported or resumed.
"""

from __future__ import annotations

from ..core.jsonio import read_json
from ..core.layout import RingLayout
from ..core.node_state import Node
from ..core.state import Ring
from ..core.statuses import READY
from .engineer import session_handoff, session_sources
from .seal import EVIDENCE, EVIDENCE_KIND, EVIDENCE_WHY, SealRequest

KIND = EVIDENCE_KIND


def cut_with_program(layout: RingLayout, node_id: str) -> bool:
    """Whether the node's engineer session was cut by the hand-over point and left a
    runnable program (session.json: `budget_cut`, the node settled `ready`)."""
    path = layout.session(node_id)
    if not path.is_file():
        return False
    session = read_json(path)
    return bool(session.get("budget_cut")) and session.get("node_status") == READY


def evidence_request(ring: Ring, layout: RingLayout, node: Node) -> SealRequest:
    """The evidence seal of such a session: submission, plan, raw log, hand-over."""
    node_id = node.id
    submission = layout.submission(node_id)
    handoff = {
        "kind": KIND,
        "evidence": True,
        **session_handoff(ring, layout, node, submission),
        "summary": "engineer session cut at the hand-over point with a runnable program; its "
        "submission was executed in this ring as any node's; this snapshot is evidence only "
        "(never imported or resumed)",
        "why": EVIDENCE_WHY,
        "run_py": (submission / "run.py").is_file(),
        "runs": True,
        "command": (node.solution or {}).get("command"),
        "tree_hash": node.tree_hash,
    }
    return SealRequest(node_id=node_id, kind=KIND, sources=session_sources(layout, node_id,
                       submission), handoff=handoff, target=EVIDENCE)  # fmt: skip
