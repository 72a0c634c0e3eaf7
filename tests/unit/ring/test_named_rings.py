"""Named rings (docs/operations.md#chains): a chain file names rings, each a Snakemake target; a
ring that continues another of the chain waits for it, as files."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from ringflow.core.errors import InputError
from ringflow.ring.named import PLAIN, invocation_rings, named_rings, workflow_rings
from ringtools import (
    FAST,
    REPO,
    SNAKEMAKE,
    make_candidate,
    make_task,
    merged,
    snakemake,
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


@pytest.mark.e2e
def test_the_demo_chain_plans_from_the_repository_root(tmp_path):
    # From the repository root (where the profiles are found by name), planned for a fresh
    # working folder: the checkout's own runs/ may hold a finished demo chain.
    def plan(profile: str, target: str) -> subprocess.CompletedProcess:
        argv = [str(SNAKEMAKE), "--profile", profile, "-n", target, "--directory", str(tmp_path)]
        return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300)

    for profile in ("gpu", "profiles/local"):
        proc = plan(profile, "ring1")
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "ring1_lock_ring" in proc.stdout and "ring2_" not in proc.stdout
    proc = plan("profiles/local", "ring2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ring2_import_carryover" in proc.stdout and "ring1_stop_manifest" in proc.stdout


@pytest.mark.e2e
def test_a_named_ring_runs_after_the_ring_it_continues_and_continues_it(tmp_path):
    task = make_task(tmp_path)
    make_candidate(tmp_path / "cands" / "a", mean=0.5)
    make_candidate(tmp_path / "cands" / "b", mean=0.7)
    # The second ring inherits what the first changed, though it was read before the first
    # ring was locked.
    rings = {"first": {"promote_top_k": 2}, "second": {"continue_from": "first"}}
    chain = merged(FAST, {"task": str(task), "candidates": str(tmp_path / "cands"),
                          "baseline": None, "guard": {"seeds": 2, "bootstrap": 60},
                          "rings": rings})  # fmt: skip
    chain_file = tmp_path / "chain.yaml"
    chain_file.write_text(yaml.safe_dump(chain))
    proc = snakemake(tmp_path, chain_file, "second")
    first, second = tmp_path / "runs" / "first", tmp_path / "runs" / "second"
    for ring in (first, second):
        assert (ring / "stop_manifest.json").is_file(), proc.stdout[-3000:]
    lock = json.loads((second / "RING.json").read_text())
    assert lock["chain"]["continues"] == "first"
    assert lock["config"]["promote_top_k"] == 2
    # Ring 2 was locked after ring 1 had ended: its clock starts after ring 1's manifest.
    assert (second / "RING.json").stat().st_mtime >= (first / "stop_manifest.json").stat().st_mtime
    assert lock["guard_seeds"] and not set(lock["guard_seeds"]) & set(
        json.loads((first / "RING.json").read_text())["guard_seeds"]
    )
    # Both summaries are shown, the first ring's before the second's.
    out = proc.stdout
    assert 0 <= out.index("ring first  task") < out.index("ring second  task")
    # Asking again runs nothing: both rings are targets that exist.
    again = snakemake(tmp_path, chain_file, "second", "-n")
    assert "Nothing to be done" in again.stdout + again.stderr
