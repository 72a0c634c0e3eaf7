"""A node's query record (nodes/<id>/queries.jsonl): one line per score query the scorer
side answered; the admitted ones count against the node's quota
(docs/contracts.md#engineer)."""

from __future__ import annotations

import json
from pathlib import Path

ADMITTED = "admitted"


def settled_count(record: Path) -> int:
    """Queries the scorer side admitted for a node, from its own record."""
    if not record.exists():
        return 0
    lines = record.read_text().splitlines()
    return sum(1 for line in lines if line.strip() and json.loads(line)["status"] == ADMITTED)
