"""Node ids never run out: the 1,000th node is planned like the first (issue: the search)."""

from __future__ import annotations

import json
import re

import pytest

from ringflow.core.layout import NODE_PATTERN
from ringflow.nodes import node_slug
from ringtools import make_candidate, make_task, snakemake, write_config


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


@pytest.mark.e2e
def test_a_ring_of_1000_static_candidates_plans(tmp_path):
    make_task(tmp_path)
    for i in range(1000):
        make_candidate(tmp_path / "cands" / f"c{i:04d}", mean=0.5)
    config = write_config(tmp_path, ring_id="big", task=str(tmp_path / "task"),
                          candidates=str(tmp_path / "cands"), baseline=None)  # fmt: skip
    # Lock and import (a checkpoint), then plan the whole ring without running it.
    snakemake(tmp_path, config, "--until", "import_nodes")
    index = json.loads((tmp_path / "runs" / "big" / "nodes" / "index.json").read_text())
    ids = [n["id"] for n in index["nodes"]]
    assert len(ids) == 1000 and ids[-1] == "n1000-c0999"
    plan = snakemake(tmp_path, config, "-n", "--quiet", "rules")
    # Every candidate's seed 0 and ablation on both search views are planned, n1000 included.
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", plan.stdout, re.M))
    assert int(counts["execute"]) == 1000 * 2 * 2, plan.stdout[-2000:]
    assert "MissingInputException" not in plan.stdout + plan.stderr
