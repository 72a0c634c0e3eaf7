"""Named rings through Snakemake: the demo chain plans from the repository root, and a
named ring runs after the ring it continues (docs/operations.md#chains)."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from ringtools import (
    FAST,
    REPO,
    SNAKEMAKE,
    make_candidate,
    make_task,
    merged,
    snakemake,
)


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
