"""How to run a deployed solution: the run instructions of MANIFEST.json hold for
final/solution/ and for the folder `ringflow export RING DEST` writes (DEST itself, no
solution/ inside), and the export's hint names that folder and the ring's Python
(docs/contracts.md#deploying-the-result)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

from ringflow.cli import main
from ringflow.core.jsonio import atomic_write_json
from ringflow.core.layout import RingLayout
from ringflow.selection.deploy import INPUTS, PREDICTIONS, complete_solution, how_to_run

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
    assert run["example"].startswith(
        "mkdir -p <predictions folder> && cd <this folder> && RINGFLOW_INPUT_DIR="
    ), run
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
    assert hint.startswith(f"run it: mkdir -p {PREDICTIONS} && cd {shlex.quote(str(dest))} && ")
    words = shlex.split(hint.removeprefix("run it: ").replace(PREDICTIONS, "OUT"))
    assert words[-4:] == [PYTHON, "run.py", "--seed", "0"], hint
    assert "solution" not in hint
    # Typed to the letter, before its folders are filled in, it makes nothing anywhere.
    before = sorted(tmp_path.rglob("*"))
    done = subprocess.run(["sh", "-c", hint.removeprefix("run it: ")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode != 0
    assert sorted(tmp_path.rglob("*")) == before


def test_the_example_runs_as_printed_into_an_output_folder_not_made_yet(tmp_path):
    program = tmp_path / "model"
    program.mkdir()
    (program / "run.py").write_text(
        "import os\n"
        "open(os.path.join(os.environ['RINGFLOW_OUTPUT_DIR'], 'p.csv'), 'w').write('ok')\n"
    )
    inputs, out = tmp_path / "inputs", tmp_path / "new" / "predictions"
    inputs.mkdir()
    example = how_to_run(["python", "run.py"], per_view=False, python=sys.executable)["example"]
    command = (example.replace(PREDICTIONS, shlex.quote(str(out)))
               .replace(INPUTS, shlex.quote(str(inputs)))
               .replace("<this folder>", shlex.quote(str(program))))  # fmt: skip
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert (out / "p.csv").read_text() == "ok"


def test_exporting_from_a_folder_that_is_no_ring_says_so(tmp_path, capsys):
    import pytest

    from ringflow.core.errors import InputError
    from ringflow.selection.deploy import export

    with pytest.raises(InputError, match="not a ring folder"):
        export(tmp_path / "runs" / "r1", tmp_path / "out")
    ring = _hand_ring(tmp_path / "runs" / "r2")
    (RingLayout(ring).final_dir / "FINAL.json").unlink(missing_ok=True)
    with pytest.raises(InputError, match="no final/ written yet"):
        export(ring, tmp_path / "out")
