"""Node ids never run out: the 1,000th node is planned like the first (issue: the search)."""

from __future__ import annotations

import re

from ringflow.core.layout import NODE_PATTERN
from ringflow.nodes import node_slug


def test_pattern_matches_every_width_and_nothing_else():
    node = re.compile(rf"^(?:{NODE_PATTERN})$")
    for good in ("n000-base", "n999-mlp", "n1000-mlp", "n123456-a.b_c"):
        assert node.match(good), good
    for bad in ("n12-mlp", "n1000", "x1000-mlp", "n1000-", "n1000-_x", "n1000-Mlp"):
        assert not node.match(bad), bad


def test_slugs_always_make_a_valid_id():
    node = re.compile(rf"^(?:{NODE_PATTERN})$")
    for name in ("_hidden", "..dots", "Mixed Case!", "---", "ü"):
        assert node.match(f"n1000-{node_slug(name)}"), name
