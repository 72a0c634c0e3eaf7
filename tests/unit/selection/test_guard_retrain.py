"""guard.retrain: each guard seed trains the finalist and the baseline anew, with a
training seed that is stated and part of the weights key."""

from __future__ import annotations

import json

from ringtools import locked_ring, make_candidate


def guard_specs(ring, node: str) -> dict:
    """The executions of the ring's guard seeds (not the baseline's power probes)."""
    record = json.loads((ring / "nodes" / node / "node.json").read_text())
    plan = record["executions"]["proxy"]
    seeds = json.loads((ring / "RING.json").read_text())["guard_seeds"]
    return {f"g{seed}": plan[f"g{seed}"] for seed in seeds}


def ring_with(tmp_path, name: str, **guard) -> object:
    make_candidate(tmp_path / "cands" / "trained", mean=0.5, weights=True)
    return locked_ring(tmp_path, tmp_path / "cands", name, guard=guard)


def test_without_retrain_every_guard_seed_replays_one_training(tmp_path):
    specs = guard_specs(ring_with(tmp_path, "replay"), "n001-trained")
    assert len({s["key"] for s in specs.values()}) == 1
    assert {s["train_seed"] for s in specs.values()} == {0}


def test_with_retrain_each_guard_seed_trains_its_own_weights(tmp_path):
    ring = ring_with(tmp_path, "retrain", retrain=True)
    specs = guard_specs(ring, "n001-trained")
    seeds = json.loads((ring / "RING.json").read_text())["guard_seeds"]
    assert {v: s["train_seed"] for v, s in specs.items()} == {f"g{g}": 10_000 + g for g in seeds}
    assert len({s["key"] for s in specs.values()}) == len(seeds)
    index = json.loads((ring / "nodes" / "index.json").read_text())
    trainers = {tuple(index["keys"][s["key"]]["trainer"]) for s in specs.values()}
    # (The scripted task has no guard view: the guard runs on the search view.)
    assert trainers == {("n001-trained", "proxy", v) for v in specs}
    # The search's own weights are untouched: seed 0 still trains with its seed.
    record = json.loads((ring / "nodes" / "n001-trained" / "node.json").read_text())
    assert record["executions"]["proxy"]["s0"]["train_seed"] == 0
