"""The candidate contract (docs/contracts.md#candidate): each bad input gets its own clear error."""

from __future__ import annotations

import json
import os

import pytest

from ringflow.candidate import copy_submission, load_solution, weights_dirs
from ringflow.core.errors import CandidateError

LIMIT = 1024


def solution(tmp_path, files: dict[str, str | bytes]):
    root = tmp_path / "sol"
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    root.mkdir(exist_ok=True)
    return root


def test_a_plain_run_py_is_a_program_without_weights(tmp_path):
    sol = load_solution(solution(tmp_path, {"run.py": "print(1)"}), LIMIT)
    assert sol.command == ("python", "run.py") and not sol.has_weights
    assert sol.training_seed(7) == 0


def test_execution_and_artifacts_are_read(tmp_path):
    root = solution(
        tmp_path,
        {
            "run.py": "",
            "EXECUTION.json": json.dumps({"seed_affects_training": True, "train_seed": 3}),
            "ARTIFACTS.json": json.dumps(
                [
                    {"path": "weights/m.pt", "per_view": True},
                    {"path": "assets/vocab.txt", "per_view": False},
                ]
            ),
            "assets/vocab.txt": "a b c",
        },
    )
    sol = load_solution(root, LIMIT)
    assert sol.training_seed(7) == 7
    assert sol.per_view_paths == ("weights/m.pt",)
    assert sol.fixed_artifacts == ("assets/vocab.txt",)
    assert weights_dirs(sol.per_view_paths) == ["weights"]


def test_a_declared_file_absent_at_submission_becomes_per_view(tmp_path):
    root = solution(
        tmp_path,
        {"run.py": "", "ARTIFACTS.json": json.dumps([{"path": "weights/m.pt", "per_view": False}])},
    )
    assert load_solution(root, LIMIT).per_view_paths == ("weights/m.pt",)


@pytest.mark.parametrize(
    "files, message",
    [
        ({"notes.txt": "x"}, "missing program"),
        ({"run.py": "", "EXECUTION.json": "{oops"}, "malformed JSON"),
        ({"run.py": "", "ARTIFACTS.json": "[1, 2"}, "malformed JSON"),
        ({"run.py": "", "EXECUTION.json": "[]"}, "expected a JSON object"),
        (
            {"run.py": "", "EXECUTION.json": '{"train_seed": "zero"}'},
            "'train_seed' must be an integer",
        ),
        (
            {"run.py": "", "EXECUTION.json": '{"seed_affects_training": 1}'},
            "'seed_affects_training' must be a bool",
        ),
        ({"run.py": "", "ARTIFACTS.json": '[{"path": "model.pt"}]'}, "top-level file"),
        ({"run.py": "", "ARTIFACTS.json": '[{"path": "/abs/model.pt"}]'}, "is absolute"),
        ({"run.py": "", "ARTIFACTS.json": '[{"path": "w/../../model.pt"}]'}, "contains '..'"),
        ({"run.py": "", "ARTIFACTS.json": '{"path": "w/m.pt"}'}, "expected a JSON list"),
        (
            {"run.py": "", "ARTIFACTS.json": '[{"path": "w/m.pt"}]', "w/m.pt": b"x" * (LIMIT + 1)},
            "over the limit",
        ),
    ],
)
def test_bad_input_gets_its_specific_error(tmp_path, files, message):
    with pytest.raises(CandidateError, match=message):
        load_solution(solution(tmp_path, files), LIMIT)


def test_symlinks_leaving_the_tree_are_refused_and_inner_ones_copied(tmp_path):
    root = solution(tmp_path, {"run.py": "", "data/a.txt": "inner"})
    os.symlink("data/a.txt", root / "alias.txt")
    sol = load_solution(root, LIMIT)
    dest = tmp_path / "copy"
    copy_submission(sol, dest)
    assert (dest / "alias.txt").read_text() == "inner" and not (dest / "alias.txt").is_symlink()
    os.symlink("/etc/hostname", root / "leak")
    with pytest.raises(CandidateError, match="leaves the solution tree"):
        load_solution(root, LIMIT)


def test_a_hard_link_to_a_file_of_the_task_is_refused(tmp_path):
    from ringflow.candidate import task_file_ids

    labels = tmp_path / "task" / "views" / "proxy" / "labels" / "y.csv"
    labels.parent.mkdir(parents=True)
    labels.write_text("id,label\n1,0\n")
    root = solution(tmp_path, {"run.py": "", "data/own.txt": "mine"})
    task_files = task_file_ids(tmp_path / "task")
    load_solution(root, LIMIT, task_files=task_files)  # its own files only: accepted
    os.link(labels, root / "data" / "peek.csv")
    with pytest.raises(CandidateError, match=r"data/peek.csv is the task's file "
                       r"views/proxy/labels/y.csv \(a hard link\)"):  # fmt: skip
        load_solution(root, LIMIT, task_files=task_files)


def test_an_artifact_path_through_a_symlink_is_refused(tmp_path):
    root = solution(
        tmp_path,
        {
            "run.py": "",
            "real/x": "",
            "ARTIFACTS.json": json.dumps([{"path": "link/m.pt", "per_view": True}]),
        },
    )
    (root / "real").mkdir(exist_ok=True)
    os.symlink("real", root / "link")
    with pytest.raises(CandidateError):
        load_solution(root, LIMIT)


def test_the_submission_leaves_out_per_view_files_progress_and_caches(tmp_path):
    root = solution(
        tmp_path,
        {
            "run.py": "",
            "progress.json": "{}",
            "weights/m.pt": "trained",
            "__pycache__/run.cpython-311.pyc": "",
            "ARTIFACTS.json": json.dumps([{"path": "weights/m.pt", "per_view": True}]),
        },
    )
    dest = tmp_path / "copy"
    copy_submission(load_solution(root, LIMIT), dest)
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()) == [
        "ARTIFACTS.json",
        "run.py",
    ]
