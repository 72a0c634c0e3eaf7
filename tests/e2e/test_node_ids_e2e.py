"""Node ids at scale: a ring of 1,000 static candidates plans (docs/ring-folder.md#nodes)."""

from __future__ import annotations

import json
import re

import pytest

from ringtools import make_candidate, make_task, snakemake, write_config


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
