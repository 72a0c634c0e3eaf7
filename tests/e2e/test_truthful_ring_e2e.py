"""One ring as a new user runs it (docs/operations.md#while-a-ring-runs): the terminal shows
ringflow's progress and the summary with its failure digest, not Snakemake's job log; `final/` is
deployable and `ringflow export` writes the same; a finished ring says so; an edit under the locked
ring is refused when it runs again; a configuration typo names the key without the schema."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ringtools import make_candidate, make_task, snakemake, write_config

pytestmark = pytest.mark.e2e

NO_OUTPUT = """\
import os
open(os.path.join(os.environ["RINGFLOW_OUTPUT_DIR"], "other.txt"), "w").write("no score\\n")
"""


@pytest.fixture(scope="module")
def ring(tmp_path_factory):
    work = tmp_path_factory.mktemp("truth")
    make_task(work)
    cands = work / "candidates"
    make_candidate(cands / "good", mean=0.9, sd=0.01, weights=True)
    broken = make_candidate(cands / "broken", mean=0.9)
    (broken / "run.py").write_text("import sys\nprint('unclosed'\n")
    header = make_candidate(cands / "header", mean=0.9)
    (header / "run.py").write_text(NO_OUTPUT)
    # Its own seed noise, so the guard's paired differences have spread.
    make_candidate(work / "baseline", mean=0.5, sd=0.01, noise_key="baseline")
    config = write_config(work, ring_id="r1", task=str(work / "task"),
                          candidates=str(cands), baseline=str(work / "baseline"),
                          promote_top_k=1, final_top_k=1,
                          terminal={"progress_s": 1, "snakemake_log": False})  # fmt: skip
    proc = snakemake(work, config)
    return work, config, work / "runs" / "r1", proc


def _ringflow(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ringflow", *args], capture_output=True,
                          text=True, check=check)  # fmt: skip


def test_the_terminal_shows_progress_and_the_summary_not_the_job_log(ring):
    _, _, _, proc = ring
    shown = proc.stdout + proc.stderr
    assert "ring r1  task scripted (maximize)" in shown
    assert "executions" in shown and "best so far" in shown and "done" in shown
    assert "failures:" in shown
    assert "n001-broken: rejected:" in shown and "does not compile" in shown
    assert "n003-header: invalid" in shown and "no usable score.json" in shown
    assert "rule execute" not in shown and "localrule" not in shown
    log = next(line for line in shown.splitlines() if line.startswith("Snakemake's log: "))
    assert "rule execute" in Path(log.split(": ", 1)[1]).read_text()
    assert len(shown.splitlines()) < 120


def test_final_solution_holds_the_weights_and_a_manifest(ring):
    _, _, root, _ = ring
    final = json.loads((root / "final" / "FINAL.json").read_text())
    assert final["decision"] == "candidate" and final["chosen"] == "n002-good"
    solution = root / "final" / "solution"
    assert (solution / "weights" / "model.txt").read_text().endswith("data=data of final\n")
    for view in ("proxy", "x3"):
        saved = solution / "weights" / view / "weights" / "model.txt"
        assert saved.read_text().endswith(f"data=data of {view}\n")
        assert saved.stat().st_nlink == 1  # a copy, never a link into the store
    manifest = json.loads((solution / "MANIFEST.json").read_text())
    node = json.loads((root / "nodes" / "n002-good" / "node.json").read_text())
    assert manifest["weights"]["final"]["key"] == node["executions"]["final"]["s0"]["key"]
    assert manifest["weights"]["final"]["key_components"]["train_seed"] == 0
    assert manifest["final_weights_complete"] is True
    assert (
        manifest["environment"]["env_key"]
        == json.loads((root / "RING.json").read_text())["env_key"]
    )
    assert {f["path"] for f in manifest["code"]} >= {"run.py", "behaviour.json"}
    assert "RINGFLOW_INPUT_DIR" in manifest["run"]["example"]


def test_export_writes_a_solution_that_runs_on_new_data_without_retraining(ring, tmp_path):
    _, _, root, _ = ring
    dest = tmp_path / "deployed"
    out = _ringflow("export", str(root), str(dest))
    assert "n002-good" in out.stdout
    assert (dest / "weights" / "model.txt").read_text().endswith("data=data of final\n")
    assert json.loads((dest / "MANIFEST.json").read_text())["node"] == "n002-good"
    new_inputs, predictions = tmp_path / "new", tmp_path / "pred"
    new_inputs.mkdir()
    predictions.mkdir()
    (new_inputs / "data.txt").write_text("data never seen\n")
    env = {**os.environ, "RINGFLOW_INPUT_DIR": str(new_inputs),
           "RINGFLOW_OUTPUT_DIR": str(predictions), "RINGFLOW_SEED": "0"}  # fmt: skip
    run = subprocess.run([sys.executable, "run.py", "--seed", "0"], cwd=dest, env=env,
                         capture_output=True, text=True, check=True)  # fmt: skip
    assert "loaded weights" in run.stderr and "trained" not in run.stderr
    assert json.loads((predictions / "score.json").read_text())["value"]
    again = _ringflow("export", str(root), str(dest), check=False)
    assert again.returncode == 2 and "already exists" in again.stderr


def test_status_of_the_finished_ring_says_finished(ring):
    _, _, root, _ = ring
    text = _ringflow("status", str(root)).stdout
    assert "finished" in text.splitlines()[1]
    assert "(live" not in text


def test_a_config_typo_names_the_key_and_the_nearest_name(ring):
    work, config, _, _ = ring
    proc = snakemake(work, config, "-n", "--config", "final_topk=2", check=False)
    shown = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "unknown key 'final_topk' (did you mean 'final_top_k'?)" in shown
    assert "additionalProperties" not in shown and "description:" not in shown
    assert len(shown.splitlines()) < 25


def test_an_edited_candidate_under_the_finished_ring_is_named_and_nothing_runs(ring):
    work, config, root, _ = ring
    run_py = work / "candidates" / "good" / "run.py"
    original = run_py.read_text()
    run_py.write_text(original + "# tuned\n")
    try:
        proc = snakemake(work, config, check=False)
        shown = proc.stdout + proc.stderr
        # The finished ring runs as nothing; the note says its results no longer describe
        # the folder, and how to run the edit (a ring that continues it).
        assert proc.returncode == 0 and "Nothing to be done" in shown, shown[-3000:]
        assert f"ringflow: note: the ring {root.relative_to(work)} has finished" in shown
        assert f"{work / 'candidates' / 'good'} (n002-good) was edited" in shown
        assert "ring_id=r1-2 continue_from=runs/r1" in shown
        verify = _ringflow("verify", str(root), check=False)
        assert verify.returncode == 1 and "edited: " in verify.stdout
    finally:
        run_py.write_text(original)
    assert _ringflow("verify", str(root), check=False).returncode == 0
