"""The users' commands: profiles by name from the repository root, and rings in private
folders (docs/operations.md#gpus-and-slurm)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from ringtools import REPO, SNAKEMAKE, make_candidate, make_task, results, snakemake, write_config

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("profile", ["gpu", "local", "profiles/gpu"])
def test_a_profile_named_from_the_repository_root_plans_a_ring(tmp_path, profile):
    done = subprocess.run(
        [str(SNAKEMAKE), "--profile", profile, "-n", "--config", "ring_id=plan-only",
         f"runs_dir={tmp_path}/runs", f"store={tmp_path}/store",
         f"resources_dir={tmp_path}/resources"],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "lock_ring" in done.stdout + done.stderr


def test_the_slurm_profile_is_found_by_name(tmp_path):
    """Found from the root; without the SLURM plugin (an optional extra) Snakemake then asks
    for the slurm executor, which proves the profile was read."""
    done = subprocess.run(
        [str(SNAKEMAKE), "--profile", "slurm", "-n", "--config", "ring_id=plan-only",
         f"runs_dir={tmp_path}/runs", f"store={tmp_path}/store"],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    said = done.stdout + done.stderr
    assert "no profile.yaml (or config.yaml) found" not in said
    assert done.returncode == 0 or "'slurm'" in said, said[-2000:]


def private_folder() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="ringflow-private-"))
    assert folder.stat().st_mode & 0o777 == 0o700
    return folder


def test_task_store_and_ring_each_in_a_private_folder(tmp_path):
    task_home, store_home, runs_home = private_folder(), private_folder(), private_folder()
    try:
        task = make_task(task_home)
        make_candidate(task_home / "cands" / "a", mean=0.6, weights=True)
        base = make_candidate(task_home / "base", mean=0.4)
        config = write_config(
            tmp_path, ring_id="private", task=str(task), candidates=str(task_home / "cands"),
            baseline=str(base), runs_dir=str(runs_home), store=str(store_home / "store"),
            promote_top_k=0, guard={"enabled": False, "seeds": 2, "alpha": 0.05, "margin": 0.0},
        )  # fmt: skip
        snakemake(tmp_path, config)
        ring = runs_home / "private"
        done = results(ring)
        assert done and all(r["status"] == "ok" for r in done.values()), done
        assert any(r["weights_mode"] == "train" for r in done.values())
        assert (ring / "final" / "FINAL.json").exists()
        assert os.stat(task_home).st_mode & 0o777 == 0o700, "nothing was opened up"
    finally:
        for folder in (task_home, store_home, runs_home):
            subprocess.run(["rm", "-rf", str(folder)], check=False)
