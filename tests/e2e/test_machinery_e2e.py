"""A failure of the machinery is loud, never a candidate's failure
(docs/operations.md#recovery-after-a-stop)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import yaml

from ringtools import (
    full_config,
    locked_ring,
    make_candidate,
    make_task,
    results,
    snakemake,
    write_config,
)

pytestmark = [pytest.mark.e2e, pytest.mark.user]


def test_a_ring_without_a_working_sandbox_refuses_to_start(tmp_path, broken_bwrap):
    make_candidate(tmp_path / "cands" / "a", mean=0.5)
    config = write_config(tmp_path, ring_id="nobox", task=str(make_task(tmp_path)),
                          candidates=str(tmp_path / "cands"), baseline=None)  # fmt: skip
    done = snakemake(tmp_path, config, check=False)
    assert done.returncode != 0
    said = done.stdout + done.stderr
    assert "no sandbox can be had on this machine" in said
    assert "No permissions to create new namespace" in said
    assert "sandbox.mode: none" in said
    ring = tmp_path / "runs" / "nobox"
    assert not (ring / "RING.json").exists() and results(ring) == {}


def test_an_interpreter_gone_after_the_lock_stops_the_ring_without_blaming_a_candidate(
    tmp_path,
):
    env = tmp_path / "program-env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    cands = tmp_path / "cands"
    for name in ("a", "b"):
        make_candidate(cands / name, mean=0.5)
    overrides = {"program": {"python": str(env / "bin" / "python")}}
    ring = locked_ring(tmp_path, cands, "broken", **overrides)
    shutil.rmtree(env)  # the machine loses the environment the ring was locked with
    config = full_config(ring_id="broken", task=str(tmp_path / "task"),
                         candidates=str(cands), baseline=None, **overrides)  # fmt: skip
    configfile = tmp_path / "broken.yaml"
    configfile.write_text(yaml.safe_dump(config))
    done = snakemake(tmp_path, configfile, check=False)
    assert done.returncode != 0
    stopped = json.loads((ring / "STOPPED.json").read_text())
    # The environment check sees the interpreter gone before the sandbox would fail on it.
    assert "environment" in stopped["reason"] or "the sandbox could not run" in stopped["reason"]
    assert "the ring" in done.stderr and "stopped" in done.stderr
    for result in results(ring).values():
        assert result["status"] != "crash", result
    # Every later job refuses at once, naming the first reason.
    again = subprocess.run(
        [sys.executable, "-m", "ringflow", "step", "execute", str(ring), "n001-a", "proxy", "s0"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert again.returncode != 0 and "the ring stopped earlier" in again.stderr


def test_a_view_changed_under_the_locked_ring_stops_it_before_the_program_runs(tmp_path):
    cands = tmp_path / "cands"
    make_candidate(cands / "a", mean=0.5, weights=True)
    ring = locked_ring(tmp_path, cands, "changed")
    data = tmp_path / "task" / "views" / "proxy" / "inputs" / "data.txt"
    data.write_text("other data\n")  # same size or not: its ctime tells
    done = subprocess.run(
        [sys.executable, "-m", "ringflow", "step", "execute", str(ring), "n001-a", "proxy", "s0"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert "view proxy changed under the locked ring" in done.stderr
    assert "data.txt was changed after the ring was locked" in done.stderr
    assert not (ring / "nodes" / "n001-a" / "exec" / "proxy" / "s0" / "result.json").exists()
    assert not list((tmp_path / "store").glob("per_view/*/*.json")), "nothing was registered"


def test_an_unconfined_ring_says_so_on_every_result_and_in_final(tmp_path):
    cands = tmp_path / "cands"
    make_candidate(cands / "a", mean=0.6, sd=0.05, noise_key="a")
    base = make_candidate(tmp_path / "base", mean=0.4, sd=0.05, noise_key="base")
    config = write_config(
        tmp_path, ring_id="trusted", task=str(make_task(tmp_path)), candidates=str(cands),
        baseline=str(base), final_top_k=1,
        sandbox={"mode": "none", "uid": 65534, "gid": 65534, "mounts": [], "network": False,
                 "env_pass": [], "tmp_mb": 64},
    )  # fmt: skip
    snakemake(tmp_path, config)
    ring = tmp_path / "runs" / "trusted"
    lock = json.loads((ring / "RING.json").read_text())
    assert lock["sandbox"]["mode"] == "none"
    done = results(ring)
    assert done and {r["sandbox"]["mode"] for r in done.values() if "sandbox" in r} == {"none"}
    final = json.loads((ring / "final" / "FINAL.json").read_text())
    assert final["sandbox"] == "none"
    assert any("unconfined" in w for w in final["warnings"])
