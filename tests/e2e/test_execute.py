"""One execution at a time, driven through `ringflow step execute` as a rule would."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ringtools import locked_ring, make_candidate, step_argv

pytestmark = pytest.mark.e2e


def test_two_executions_of_one_key_started_together_train_exactly_once(tmp_path):
    cands = tmp_path / "cands"
    # Identical trees: one weights key for both nodes' seed-0 run on a view.
    for name in ("twin-a", "twin-b"):
        make_candidate(cands / name, mean=0.5, weights=True, sleep=1)
    ring = locked_ring(tmp_path, cands, "twins")
    run = [sys.executable, "-m", "ringflow", "step", "execute", str(ring)]
    procs = [subprocess.Popen([*run, node, "proxy", "s0"], stdout=subprocess.DEVNULL)
             for node in ("n001-twin-a", "n002-twin-b")]  # fmt: skip
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    results = [json.loads((ring / "nodes" / n / "exec" / "proxy" / "s0" / "result.json")
                          .read_text()) for n in ("n001-twin-a", "n002-twin-b")]  # fmt: skip
    assert sorted(r["weights_mode"] for r in results) == ["replay", "train"]
    assert results[0]["weights_key"] == results[1]["weights_key"]
    assert all(r["status"] == "ok" for r in results)
    assert len(list((tmp_path / "store" / "per_view").glob("*/*.json"))) == 1


def test_an_execution_of_a_rejected_node_is_refused_with_its_error(tmp_path):
    cands = tmp_path / "cands"
    (cands / "empty").mkdir(parents=True)
    ring = locked_ring(tmp_path, cands, "rejected")
    argv = step_argv("execute", str(ring), "n001-empty", "proxy", "s0")
    done = subprocess.run(argv, capture_output=True, text=True)
    assert done.returncode == 2
    assert "rejected at import" in done.stderr and "missing program" in done.stderr


def test_a_fixed_file_beside_the_per_view_weights_does_not_stop_training(tmp_path):
    cands = tmp_path / "cands"
    folder = make_candidate(cands / "vocab", mean=0.5, weights=True)
    (folder / "weights").mkdir()
    (folder / "weights" / "vocab.txt").write_text("a b c\n")
    (folder / "ARTIFACTS.json").write_text(json.dumps([
        {"path": "weights/model.txt", "per_view": True},
        {"path": "weights/vocab.txt", "per_view": False},
    ]))  # fmt: skip
    ring = locked_ring(tmp_path, cands, "fixed")
    run = [sys.executable, "-m", "ringflow", "step", "execute", str(ring), "n001-vocab", "proxy"]
    for variant, mode in (("s0", "train"), ("s1", "replay")):
        subprocess.run([*run, variant], check=True, capture_output=True)
        result_path = ring / "nodes" / "n001-vocab" / "exec" / "proxy" / variant / "result.json"
        result = json.loads(result_path.read_text())
        assert (result["status"], result["weights_mode"]) == ("ok", mode), result["reason"]
    submission = ring / "nodes" / "n001-vocab" / "solution" / "weights" / "vocab.txt"
    assert submission.read_text() == "a b c\n"
