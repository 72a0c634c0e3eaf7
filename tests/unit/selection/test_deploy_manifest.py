"""How to run a deployed solution: the run instructions of MANIFEST.json hold for
final/solution/ and for the folder `ringflow export RING DEST` writes (DEST itself, no
solution/ inside), and the export's hint names that folder and the ring's Python
(docs/contracts.md#deploying-the-result)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from ringflow.cli import main
from ringflow.core.jsonio import atomic_write_json
from ringflow.core.layout import RingLayout
from ringflow.selection.deploy import complete_solution, how_to_run

PYTHON = "/opt/program env/bin/python"  # a space: the hint must quote it
NODE = "n001-a"


def _hand_ring(root: Path) -> Path:
    """A ring whose final/ chose n001-a, a program without weights."""
    ring = root / "runs" / "hand"
    layout = RingLayout(ring)
    atomic_write_json(layout.ring_json, {
        "ring_id": "hand", "ring_dir": str(ring), "store": str(root / "store"),
        "final_view": "final", "search_views": ["proxy"],
        "task": {"name": "toy", "direction": "maximize"},
        "env_key": "e" * 64, "environment": {"python": "3.11"}, "program_python": PYTHON,
    })  # fmt: skip
    atomic_write_json(layout.node_json(NODE), {
        "id": NODE, "role": "candidate", "tree_hash": "t" * 64, "executions": {},
        "solution": {"command": ["python", "run.py"], "per_view_paths": []},
    })  # fmt: skip
    layout.submission(NODE).mkdir(parents=True)
    (layout.submission(NODE) / "run.py").write_text("print('predict')\n")
    atomic_write_json(layout.final_dir / "FINAL.json", {"chosen": NODE})
    return ring


def _assert_runs_from_its_own_folder(run: dict) -> None:
    assert "solution" not in run["working_directory"], run
    assert "solution" not in run["example"], run
    assert run["example"].startswith("cd <this folder> && RINGFLOW_INPUT_DIR="), run
    assert run["command"] == "python run.py --seed 0"


def test_the_run_instructions_name_no_solution_folder():
    run = how_to_run(["python", "run.py"], per_view=False, python=PYTHON)
    _assert_runs_from_its_own_folder(run)
    assert run["example"].endswith(f"{shlex.quote(PYTHON)} run.py --seed 0"), run
    assert PYTHON in run["python"]
    bare = how_to_run(["python", "run.py"], per_view=True)
    assert bare["example"].endswith(" python run.py --seed 0"), bare
    assert "loads them and does not retrain" in bare["weights"]


def test_final_solution_s_manifest_runs_from_its_own_folder(tmp_path):
    ring = _hand_ring(tmp_path)
    layout = RingLayout(ring)
    solution = layout.final_dir / "solution"
    solution.mkdir()
    (solution / "run.py").write_text("print('predict')\n")
    manifest = complete_solution(layout, NODE, solution)
    _assert_runs_from_its_own_folder(manifest["run"])
    assert json.loads((solution / "MANIFEST.json").read_text())["run"] == manifest["run"]


def test_an_export_s_manifest_and_hint_name_the_exported_folder_and_the_ring_s_python(
    tmp_path, capsys
):
    ring = _hand_ring(tmp_path)
    dest = tmp_path / "deployed model"
    assert main(["export", str(ring), str(dest)]) == 0
    assert (dest / "run.py").is_file() and not (dest / "solution").exists()
    manifest = json.loads((dest / "MANIFEST.json").read_text())
    _assert_runs_from_its_own_folder(manifest["run"])
    said = capsys.readouterr().out.splitlines()
    hint = next(line for line in said if line.startswith("run it: "))
    words = shlex.split(hint.removeprefix("run it: "))
    assert words[:3] == ["cd", str(dest), "&&"], hint
    assert words[-4:] == [PYTHON, "run.py", "--seed", "0"], hint
    assert "solution" not in hint
