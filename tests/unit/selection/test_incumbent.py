"""The chain's incumbent (docs/guard.md#the-incumbent), from the records alone: the parent's
final/ choice, found in this ring by its program's tree, or the baseline and why."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from ringflow.core.state import Ring
from ringflow.reporting.headline import history_line
from ringflow.selection.incumbent import history, incumbent_node, reference
from ringtools import full_config, ring_config

BASE, GOOD = "n000-base", "n001-good"


def write(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))


def a_ring(root: Path, ring_id: str, previous: str | None, nodes: dict[str, str]) -> Ring:
    """A ring folder with a lock and node.json files ({id: tree hash})."""
    lock = {"ring_id": ring_id, "ring_dir": str(root), "guard_seeds": [3],
            "chain_exposed_seeds": [], "continue_from": previous,
            "config": full_config(guard={"against": "incumbent"})}  # fmt: skip
    write(root / "RING.json", lock)
    for node, tree in nodes.items():
        write(root / "nodes" / node / "node.json", {"id": node, "tree_hash": tree})
    return Ring.from_record(lock)


def decided(root: Path, decision: str, chosen: str, **extra) -> None:
    write(root / "final" / "FINAL.json",
          {"decision": decision, "chosen": chosen, "baseline": BASE, **extra})  # fmt: skip


def index(nodes: dict[str, str], statuses: dict[str, str] | None = None) -> dict:
    statuses = statuses or {}
    return {"baseline": BASE,
            "nodes": [{"id": n, "role": "baseline" if n == BASE else "candidate",
                       "status": statuses.get(n, "ready")} for n in nodes]}  # fmt: skip


@pytest.fixture
def chain(tmp_path):
    nodes = {BASE: "tree-base", GOOD: "tree-good"}
    parent = a_ring(tmp_path / "r1", "r1", None, nodes)
    child = a_ring(tmp_path / "r2", "r2", "../r1", {BASE: "tree-base", "n001-good": "tree-good",
                                                    "n002-mid": "tree-mid"})  # fmt: skip
    return parent, child, {BASE: "", GOOD: "", "n002-mid": ""}


def test_a_first_ring_guards_against_the_baseline(chain):
    parent, _, _ = chain
    ref = reference(parent, index({BASE: "", GOOD: ""}))
    assert ref["node"] == BASE and ref["role"] == "baseline" and ref["incumbent"] is None


def test_a_continuation_guards_against_its_parents_choice(chain, tmp_path):
    _, child, nodes = chain
    decided(tmp_path / "r1", "candidate", GOOD)
    ref = reference(child, index(nodes))
    assert ref["node"] == GOOD and ref["role"] == "incumbent"
    assert ref["incumbent"]["chosen_in"] == "r1" and ref["baseline"] == BASE
    assert incumbent_node(child, index(nodes)) == GOOD


def test_a_kept_incumbent_names_the_ring_that_chose_it(chain, tmp_path):
    _, child, nodes = chain
    decided(tmp_path / "r1", "incumbent", GOOD, incumbent={"chosen_in": "r0"})
    assert reference(child, index(nodes))["incumbent"]["chosen_in"] == "r0"


def test_a_parent_that_kept_the_baseline_leaves_the_baseline(chain, tmp_path):
    _, child, nodes = chain
    decided(tmp_path / "r1", "baseline", BASE)
    ref = reference(child, index(nodes))
    assert ref["node"] == BASE and ref["role"] == "baseline"
    assert incumbent_node(child, index(nodes)) is None


def test_guard_against_baseline_leaves_the_baseline_and_warns(chain, tmp_path):
    _, child, nodes = chain
    decided(tmp_path / "r1", "candidate", GOOD)
    child = dataclasses.replace(child, config=ring_config(guard={"against": "baseline"}))
    ref = reference(child, index(nodes))
    assert ref["node"] == BASE and ref["role"] == "baseline"
    assert "does not keep the chain's incumbent" in ref["warning"]


def test_an_incumbent_that_is_not_ready_here_falls_back_to_the_baseline_and_says_so(
    chain, tmp_path
):
    _, child, nodes = chain
    decided(tmp_path / "r1", "candidate", GOOD)
    ref = reference(child, index(nodes, {GOOD: "history"}))
    assert ref["node"] == BASE and "not a ready node of this ring" in ref["warning"]


def test_a_changed_program_is_not_the_incumbent(chain, tmp_path):
    _, child, nodes = chain
    decided(tmp_path / "r1", "candidate", GOOD)
    write(tmp_path / "r2" / "nodes" / GOOD / "node.json", {"id": GOOD, "tree_hash": "edited"})
    assert reference(child, index(nodes))["node"] == BASE


def test_history_reads_every_ring_first_to_last(chain, tmp_path):
    decided(tmp_path / "r1", "candidate", GOOD, guard_against="baseline", reference=BASE,
            improvement_over_reference={"difference": 0.2, "interval": [0.1, 0.3],
                                        "view": "final"})  # fmt: skip
    decided(tmp_path / "r2", "incumbent", GOOD, guard_against="incumbent", reference=GOOD,
            incumbent={"chosen_in": "r1"})  # fmt: skip
    rows = history(tmp_path / "r2")
    assert [r["ring"] for r in rows] == ["r1", "r2"]
    assert history_line(rows[0]) == (
        "r1: n001-good replaced the baseline n000-base by +0.2000 on final [+0.1000, +0.3000] "
        "(positive is better)"
    )
    assert history_line(rows[1]) == "r2: kept the incumbent n001-good (chosen in r1)"


def test_history_names_the_incumbent_as_the_ring_that_chose_it_numbered_it(chain, tmp_path):
    decided(tmp_path / "r1", "candidate", "n003-good")
    decided(tmp_path / "r2", "incumbent", GOOD, guard_against="incumbent", reference=GOOD,
            incumbent={"chosen_in": "r1", "node": GOOD, "parent_ring": "r1",
                       "parent_node": "n003-good"})  # fmt: skip
    rows = history(tmp_path / "r2")
    assert history_line(rows[1]) == "r2: kept the incumbent n001-good (chosen in r1 as n003-good)"


def test_history_tells_a_ring_that_stopped_from_one_still_deciding(chain, tmp_path):
    decided(tmp_path / "r2", "incumbent", GOOD, incumbent={"chosen_in": "r1"})
    rows = history(tmp_path / "r2")
    assert history_line(rows[0]) == "r1: no final/ yet"
    write(tmp_path / "r1" / "STOPPED.json", {"reason": "the scorer failed", "cause": "task"})
    rows = history(tmp_path / "r2")
    assert history_line(rows[0]) == "r1: stopped before its decision: no final/"
