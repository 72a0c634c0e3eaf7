"""A continuation's configuration through Snakemake: a key given on the command line wins
over the inherited value even when it is the default's own value, in the lock job too, and
the summary's first lines list it."""

from __future__ import annotations

import json

import pytest

from ringtools import make_candidate, make_task, snakemake, write_config

pytestmark = pytest.mark.e2e

GUARD_OFF = {"enabled": False, "seeds": 5, "alpha": 0.05, "margin": 0.0}


def test_a_command_line_key_at_its_default_value_is_kept_and_listed(tmp_path):
    task = make_task(tmp_path)
    make_candidate(tmp_path / "cands" / "a", mean=0.6)
    make_candidate(tmp_path / "cands" / "b", mean=0.5)
    first = write_config(tmp_path, ring_id="r1", task=str(task), candidates=str(tmp_path /
                         "cands"), baseline=None, guard=GUARD_OFF, final_top_k=1)  # fmt: skip
    snakemake(tmp_path, first)
    second = tmp_path / "second.yaml"
    second.write_text("{}\n")  # the quick settings come from the first ring by inheritance
    snakemake(tmp_path, second, "--config", "ring_id=r2", "continue_from=runs/r1",
              "final_top_k=3")  # fmt: skip
    ring = json.loads((tmp_path / "runs" / "r2" / "RING.json").read_text())
    assert ring["config"]["final_top_k"] == 3  # the default's value, given: not inherited
    assert ring["config"]["guard"]["enabled"] is False  # left out: inherited
    assert ring["chain"]["changed"]["final_top_k"] == {"parent": 1, "this": 3}
    head = (tmp_path / "runs" / "r2" / "summary.txt").read_text().splitlines()[:8]
    assert "  final_top_k: 1 -> 3" in head
