"""Limits per view (docs/operations.md#health-supervision): `limits` for every view,
`limits_per_view` over it for named views; the lock records them, the scheduler asks for them, the
supervisor enforces them."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from ringflow.core.clock import view_limits
from ringflow.core.errors import InputError
from ringflow.core.state import Ring
from ringflow.ring.lock import lock_ring
from ringtools import (
    full_config,
    locked_ring,
    make_candidate,
    make_task,
    snakemake,
    step_argv,
    write_config,
)

FINAL = {"memory_gb": 3, "time_limit_min": 20, "threads": 2}

# Holds 300 MB for a moment, then writes a score and the thread count it was given.
HUNGRY = """\
import json, os, time
block = bytearray(300 * 2**20)
for i in range(0, len(block), 4096):
    block[i] = 1
time.sleep(0.5)
out = os.environ["RINGFLOW_OUTPUT_DIR"]
with open(os.path.join(out, "score.json"), "w") as f:
    json.dump({"value": 0.5, "threads": os.environ["OMP_NUM_THREADS"]}, f)
"""


def hungry_candidates(tmp_path):
    folder = tmp_path / "cands" / "hungry"
    folder.mkdir(parents=True)
    (folder / "run.py").write_text(HUNGRY)
    return tmp_path / "cands"


def test_the_lock_records_each_views_limits(tmp_path):
    ring = locked_ring(
        tmp_path, hungry_candidates(tmp_path), "pv", limits_per_view={"final": FINAL}
    )
    lock = json.loads((ring / "RING.json").read_text())
    final = {**lock["config"]["limits"], **FINAL}  # laid over `limits` key by key
    assert lock["views"]["final"]["limits"] == final
    assert lock["views"]["proxy"]["limits"] == lock["config"]["limits"]
    manifest = json.loads((ring / "views" / "final.json").read_text())
    assert manifest["limits"] == final
    assert view_limits(Ring.from_record(lock), "final") == final
    assert lock["views"]["proxy"]["input_bytes"] == len("data of proxy\n")
    # Threads are part of the environment key: the final view's runs (2 threads) key their
    # weights with an environment of their own, the others with the ring's.
    assert lock["views"]["proxy"]["env_key"] == lock["env_key"]
    assert lock["views"]["final"]["env_key"] != lock["env_key"]


def test_weights_keys_use_the_environment_of_their_views_threads(tmp_path):
    cands = tmp_path / "cands"
    make_candidate(cands / "a", mean=0.5, weights=True)
    ring = locked_ring(tmp_path, cands, "keys", limits_per_view={"final": FINAL})
    lock = json.loads((ring / "RING.json").read_text())
    node = json.loads((ring / "nodes" / "n001-a" / "node.json").read_text())
    for view in ("proxy", "final"):
        components = node["executions"][view]["s0"]["key_components"]
        assert components["env_key"] == lock["views"][view]["env_key"]


def test_a_partial_entry_is_laid_over_limits_and_an_unknown_view_is_refused(tmp_path):
    config = full_config(ring_id="pv", task=str(make_task(tmp_path)),
                         candidates=str(hungry_candidates(tmp_path)), baseline=None,
                         limits_per_view={"final": {"memory_gb": 64}})  # fmt: skip
    ring = lock_ring(config, tmp_path)
    assert view_limits(ring, "final") == {**config["limits"], "memory_gb": 64}
    wrong = {**config, "ring_id": "pv2", "limits_per_view": {"finall": {"memory_gb": 64}}}
    with pytest.raises(InputError, match="limits_per_view names finall, not a view"):
        lock_ring(wrong, tmp_path)


def _execute_jobs(dry_run: str) -> dict[str, dict]:
    """view -> the threads and resources the dry run lists for that view's executions."""
    jobs = {}
    for block in dry_run.split("rule execute:")[1:]:
        block = block.split("\n\n")[0]
        view = re.search(r"wildcards: .*view=([A-Za-z0-9._-]+)", block)
        if not view:
            continue
        threads = re.search(r"threads: (\d+)", block)
        resources = dict(re.findall(r"(mem_mb|runtime)=(\d+)", block))
        jobs[view.group(1)] = {"threads": int(threads.group(1)) if threads else 1,
                               **{k: int(v) for k, v in resources.items()}}  # fmt: skip
    return jobs


def test_per_view_limits_reach_the_scheduler(tmp_path):
    cands = hungry_candidates(tmp_path)
    # A ring long enough that its clock cuts no execution's SLURM time limit (which stops
    # at the ring's stop_at, tests/unit/cluster).
    long = {"duration_min": 240}
    locked_ring(tmp_path, cands, "sched", limits_per_view={"final": FINAL}, timeline=long)
    config = write_config(tmp_path, ring_id="sched", task=str(make_task(tmp_path)),
                          candidates=str(cands), baseline=None,
                          limits_per_view={"final": FINAL}, timeline=long)  # fmt: skip
    node = "runs/sched/nodes/n001-hungry"  # as the rules name it, relative to --directory
    targets = [f"{node}/exec/{view}/s0/score.json" for view in ("proxy", "final")]
    dry = snakemake(tmp_path, config, "-n", *targets).stdout
    jobs = _execute_jobs(dry)
    grace_min = 2 / 60  # exec_health.term_grace_s of config/quick.yaml
    assert jobs["final"] == {"threads": 2, "mem_mb": 3 * 1024 + 512,
                             "runtime": int(20 + grace_min + 30) + 1}  # fmt: skip
    assert jobs["proxy"] == {"threads": 1, "mem_mb": 4 * 1024 + 512,
                             "runtime": int(10 + grace_min + 30) + 1}  # fmt: skip


@pytest.mark.user
def test_the_supervisor_enforces_each_views_own_limits(tmp_path):
    small = {"memory_gb": 0.2}  # the proxy view: too little for the program's 300 MB
    ring = locked_ring(tmp_path, hungry_candidates(tmp_path), "mem",
                       limits_per_view={"proxy": small, "final": FINAL})  # fmt: skip
    outcome = {}
    for view in ("proxy", "final"):
        run = step_argv("execute", str(ring), "n001-hungry", view, "s0")
        subprocess.run(run, check=True, capture_output=True)
        exec_dir = ring / "nodes" / "n001-hungry" / "exec" / view / "s0"
        outcome[view] = json.loads((exec_dir / "result.json").read_text())
    proxy, final = outcome["proxy"], outcome["final"]
    if not proxy["limits"]["memory"]["enforced"]:
        pytest.skip(f"memory limit not enforceable here: {proxy['limits']['memory']['reason']}")
    assert proxy["status"] == "crash"
    if proxy["limits"]["memory"].get("best_effort"):
        # No memory cgroup (an ordinary user): RLIMIT_DATA refuses the 300 MB.
        assert "RLIMIT_DATA" in proxy["reason"] or "memory limit (ringflow's" in proxy["reason"]
        assert final["limits"]["memory"]["rlimit_data_bytes"] == 3 * 1024**3
    else:
        # Killed by the memory limit (through bubblewrap the kill shows as exit code 137).
        assert 9 in (proxy["signal"], proxy["exit_code"] - 128)
        assert any(event["event"] == "oom_kill" for event in proxy["events"])
    assert final["status"] == "ok"
    assert final["limits"]["memory"]["enforced"]
    limit_bytes = [outcome[v]["limits"]["memory"].get("limit_bytes") for v in ("proxy", "final")]
    assert limit_bytes[0] < limit_bytes[1]
    written = ring / "nodes" / "n001-hungry" / "exec" / "final" / "s0" / "output" / "score.json"
    assert json.loads(written.read_text())["threads"] == "2"
