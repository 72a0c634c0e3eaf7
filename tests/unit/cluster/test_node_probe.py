"""The compute-node probe (docs/slurm.md#compute-nodes-are-probed): what the job runs on
the node, run here for real without SLURM, and how the driver reads its answer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from ringflow.cluster.node_check import MARK, TOKEN_FILE, folder_fact, python_fact
from ringflow.cluster.node_probe import node_problems, parse_answer, probe_argv
from ringflow.cluster.target import SlurmTarget

REPO = Path(__file__).resolve().parents[3]
DEFAULTS = yaml.safe_load((REPO / "config" / "config.yaml").read_text())


def _request(tmp_path: Path, token: str = "t0k3n", **over) -> dict:
    ring, store = tmp_path / "ring", tmp_path / "store"
    for folder in (ring, store):
        folder.mkdir(exist_ok=True)
        (folder / TOKEN_FILE).write_text(token + "\n")
    return {
        "token": token,
        "folders": {"ring folder": str(ring), "store": str(store)},
        "program_python": sys.executable,
        "sandbox": {**DEFAULTS["sandbox"], "mode": "none"},
        "gpus": 0,
        **over,
    }


def _run_check(request: dict) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "ringflow.cluster.node_check", json.dumps(request)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    facts = parse_answer("srun: a line of its own\n" + done.stdout)
    assert facts is not None, done.stdout
    return facts


def test_the_node_side_finds_the_drivers_folders_and_interpreter(tmp_path):
    facts = _run_check(_request(tmp_path))
    assert facts["folders"] == {"ring folder": {"ok": True}, "store": {"ok": True}}
    assert facts["program_python"]["ok"] and facts["program_python"]["version"][0] == "3"
    assert node_problems(facts) == []


def test_a_folder_without_the_drivers_token_is_not_the_shared_one(tmp_path):
    request = _request(tmp_path)
    (Path(request["folders"]["store"]) / TOKEN_FILE).write_text("another\n")
    facts = _run_check(request)
    assert not facts["folders"]["store"]["ok"]
    [problem] = node_problems(facts)
    assert problem.startswith("the store on ") and "filesystem the nodes share" in problem


def test_missing_folders_and_interpreters_are_named():
    missing = Path("/nonexistent/ringflow-ring")
    gone = folder_fact(missing, "x")
    assert gone == {"ok": False, "reason": f"{missing} does not exist on this node"}
    fact = python_fact("/nonexistent/python3")
    assert not fact["ok"] and "/nonexistent/python3 does not run on this node" in fact["reason"]
    failing = python_fact("/bin/false")
    assert not failing["ok"] and "exit code 1" in failing["reason"]


def test_a_probe_that_finds_no_gpu_is_a_problem():
    facts = {
        "host": "g001",
        "sandbox": {"ok": True},
        "program_python": {"ok": True},
        "folders": {},
        "gpu": {"ok": False, "gpus": [], "driver": None, "reason": "NVML: driver not loaded"},
    }
    assert node_problems(facts) == [
        "GPUs on g001: SLURM gave the probe job none that NVML sees (NVML: driver not loaded)"
    ]


def test_the_answer_is_the_marked_line_and_nothing_else():
    assert parse_answer("no answer here\n") is None
    assert parse_answer(MARK + "not json\n") is None
    assert parse_answer(MARK + '{"host": "vm"}\n') == {"host": "vm"}


def test_the_probe_job_asks_one_cpu_and_the_executions_gpus():
    argv = probe_argv({"token": "t"}, SlurmTarget("gpu", "a100", True), 2, "ringflow-r_node-probe")
    assert argv[0] == "srun" and "--partition=gpu" in argv and "--gpus=a100:2" in argv
    assert "--cpus-per-task=1" in argv and "--job-name=ringflow-r_node-probe" in argv
    assert argv[-3:-1] == ["-m", "ringflow.cluster.node_check"]
    assert json.loads(argv[-1]) == {"token": "t"}
    plain = probe_argv({}, SlurmTarget(None), 0, "n")
    assert not any(a.startswith(("--partition", "--gpus")) for a in plain)
