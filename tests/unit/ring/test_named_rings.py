"""Named rings (docs/operations.md#chains): a chain file names rings, each a Snakemake target; a
ring that continues another of the chain waits for it, as files."""

from __future__ import annotations

from pathlib import Path

import pytest

from ringflow.core.errors import InputError
from ringflow.ring.named import PLAIN, invocation_rings, named_rings, workflow_rings
from ringtools import (
    REPO,
)

DEMO_CHAIN = REPO / "config" / "chain.yaml"
BASE = {"ring_id": "demo", "runs_dir": "runs", "task": "", "continue_from": None}


def test_the_demo_chain_applies_only_without_a_configuration_file_and_with_the_demo_task():
    rings = named_rings(dict(BASE), DEMO_CHAIN)
    assert [r.name for r in rings] == ["ring1", "ring2"]
    assert rings[1].parent == "ring1"
    assert rings[1].config["continue_from"] == str(Path("runs") / rings[0].config["ring_id"])
    assert named_rings(dict(BASE), None) == []
    assert named_rings({**BASE, "task": "/some/task"}, DEMO_CHAIN) == []


def test_a_rings_overrides_are_laid_over_the_configuration_key_by_key():
    config = {**BASE, "timeline": {"duration_min": 60, "node_tail_min": 5},
              "rings": {"first": {"timeline": {"duration_min": 3}},
                        "second": {"continue_from": "first", "ring_id": "two"}}}  # fmt: skip
    first, second = named_rings(config, None)
    assert first.config["ring_id"] == "first"  # the name, unless ring_id is given
    assert first.config["timeline"] == {"duration_min": 3, "node_tail_min": 5}
    assert "rings" not in first.config
    assert second.root == Path("runs") / "two"
    assert second.config["timeline"]["duration_min"] == 60


@pytest.mark.parametrize(
    "rings, message",
    [
        ({"all": {}}, "ring name 'all'"),
        ({"ring-1": {}}, "letters and digits"),
        ({"a": {"continue_from": "b"}, "b": {}}, "not an earlier ring"),
        ({"a": {"ring_id": "x"}, "b": {"ring_id": "x"}}, "both run in"),
        ({"a": ["not", "a", "mapping"]}, "must be a mapping"),
    ],
)
def test_a_bad_chain_is_refused_with_what_is_wrong(rings, message):
    with pytest.raises(InputError, match=message):
        named_rings({**BASE, "rings": rings}, None)


def test_the_configured_ring_is_the_chain_ring_with_its_folder_else_a_ring_of_its_own():
    rings, configured = workflow_rings(dict(BASE), DEMO_CHAIN)
    assert configured.name == "ring1" and len(rings) == 2
    rings, configured = workflow_rings({**BASE, "ring_id": "X"}, DEMO_CHAIN)
    assert configured.name == PLAIN and configured.prefix == ""
    assert [r.name for r in rings] == [PLAIN, "ring1", "ring2"]


def test_an_invocation_runs_the_named_ring_and_the_unfinished_rings_it_continues(tmp_path):
    chain = {"r1": {}, "r2": {"continue_from": "r1"}, "r3": {"continue_from": "r2"}}
    config = {**BASE, "runs_dir": str(tmp_path), "ring_id": "X", "rings": chain}
    rings, configured = workflow_rings(config, None)
    names = lambda targets: [r.name for r in invocation_rings(rings, configured, targets)]  # noqa: E731
    assert names([]) == [PLAIN]
    assert names(["r3"]) == ["r1", "r2", "r3"]
    (tmp_path / "r1").mkdir()
    (tmp_path / "r1" / "stop_manifest.json").write_text("{}")
    assert names(["r3"]) == ["r2", "r3"]
    assert names(["r1"]) == ["r1"]  # asked for by name: its own summary, even when finished
    assert names([str(tmp_path / "r2" / "summary.md")]) == ["r2"]
