"""The built-in demo task: its data split, its scorer and validator, and its candidates.

Everything runs for real: the task is materialised from scikit-learn's bundled digits,
and candidates, scorer and validator run as subprocesses with the environment that
ringflow gives them.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ringflow.demo import baseline_dir, candidates_dir, materialise_task

VIEWS = ("proxy", "x3", "guard", "final")
CANDIDATES = ("mlp", "forest", "knn", "logreg", "crasher")


@pytest.fixture(scope="module")
def task(tmp_path_factory) -> Path:
    return materialise_task(tmp_path_factory.mktemp("demo") / "task")


# ---- helpers ----------------------------------------------------------------------------


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def tree_stats(root: Path, skip: tuple[str, ...] = ()) -> dict[str, tuple[int, int, int]]:
    stats = {}
    for path in root.rglob("*"):
        if path.is_file() and path.name not in skip:
            st = path.stat()
            stats[str(path.relative_to(root))] = (st.st_size, st.st_mtime_ns, st.st_ino)
    return stats


def read_rows(path: Path) -> tuple[list[str], list[list[str]]]:
    with path.open(newline="") as handle:
        rows = list(csv.reader(handle))
    return rows[0], rows[1:]


def ids_of(path: Path) -> set[int]:
    header, rows = read_rows(path)
    assert header[0] == "id"
    return {int(row[0]) for row in rows}


def working_copy(name: str, dest: Path) -> Path:
    """A private copy of a solution folder, as ringflow gives each execution."""
    source = baseline_dir() if name == "baseline" else candidates_dir() / name
    return Path(shutil.copytree(source, dest / name))


def run_solution(
    solution: Path, view: Path, out: Path, seed: int = 0, ablate: bool = False
) -> subprocess.CompletedProcess:
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.update(
        OMP_NUM_THREADS="1",
        OPENBLAS_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        RINGFLOW_INPUT_DIR=str(view / "inputs"),
        RINGFLOW_OUTPUT_DIR=str(out),
        RINGFLOW_PROGRESS_FILE=str(solution / "progress.json"),
        RINGFLOW_WEIGHTS_DIR=str(solution / "weights"),
    )
    command = [sys.executable, "run.py", "--seed", str(seed)] + (["--ablate"] if ablate else [])
    return subprocess.run(
        command, cwd=solution, env=env, capture_output=True, text=True, timeout=120
    )


def run_task_script(task: Path, script: str, **options: object) -> subprocess.CompletedProcess:
    """Run the task's scorer or validator the way ringflow does: from the task folder."""
    command = [sys.executable, script]
    for name, value in options.items():
        command += [f"--{name}", str(value)]
    return subprocess.run(command, cwd=task, capture_output=True, text=True, timeout=60)


def score(task: Path, pred: Path, view: str, seed: int, out: Path) -> dict:
    labels = task / "views" / view / "labels"
    done = run_task_script(task, "scorer.py", pred=pred, labels=labels, seed=seed, out=out)
    assert done.returncode == 0, done.stderr
    return json.loads(out.read_text())


def validate(task: Path, pred: Path, view: str) -> subprocess.CompletedProcess:
    inputs = task / "views" / view / "inputs"
    return run_task_script(task, "validator.py", pred=pred, inputs=inputs)


def write_predictions(folder: Path, rows: list[tuple[object, object]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["id,label", *(f"{i},{label}" for i, label in rows)]
    (folder / "predictions.csv").write_text("\n".join(lines) + "\n")
    return folder


def true_labels(task: Path, view: str) -> list[tuple[int, int]]:
    _, rows = read_rows(task / "views" / view / "labels" / "test.csv")
    return [(int(i), int(label)) for i, label in rows]


# ---- the task folder --------------------------------------------------------------------


def test_task_yaml_declares_name_direction_scorer_and_validator(task):
    spec = yaml.safe_load((task / "task.yaml").read_text())
    assert spec == {
        "name": "digits-demo",
        "direction": "maximize",
        "scorer": "python scorer.py",
        "validator": "python validator.py",
        "views": {"search": ["proxy", "x3"], "guard": ["guard"], "final": "final"},
        "scorer_bootstrap": True,
    }
    for view in VIEWS:
        for rel in ("inputs/train.csv", "inputs/test.csv", "labels/test.csv"):
            assert (task / "views" / view / rel).is_file()


def test_two_materialisations_are_byte_identical(task, tmp_path):
    other = materialise_task(tmp_path / "other")
    assert tree_bytes(other) == tree_bytes(task)


def test_second_materialisation_keeps_every_mtime_and_repairs_a_changed_file(tmp_path):
    folder = materialise_task(tmp_path / "task")
    before = tree_stats(folder)
    materialise_task(folder)
    assert tree_stats(folder) == before

    damaged = folder / "views" / "x3" / "labels" / "test.csv"
    original = damaged.read_bytes()
    damaged.write_bytes(b"id,label\n")
    materialise_task(folder)
    assert damaged.read_bytes() == original
    after = tree_stats(folder)
    changed = {rel for rel in before if after[rel] != before[rel]}
    assert changed == {"views/x3/labels/test.csv"}


def test_test_rows_never_appear_in_any_training_set_or_another_view(task):
    """Intent: the test rows of the three views are pairwise disjoint, and no view's test
    row is a training row of any view. Training rows may be shared (final trains on the
    whole pool that proxy and x3 split between them)."""
    train_ids = {v: ids_of(task / "views" / v / "inputs" / "train.csv") for v in VIEWS}
    test_ids = {v: ids_of(task / "views" / v / "inputs" / "test.csv") for v in VIEWS}
    all_train = set().union(*train_ids.values())
    for view in VIEWS:
        assert test_ids[view], view
        assert not test_ids[view] & all_train, view
        assert ids_of(task / "views" / view / "labels" / "test.csv") == test_ids[view]
        for other in VIEWS:
            if other != view:
                assert not test_ids[view] & test_ids[other], (view, other)
    assert not train_ids["proxy"] & train_ids["x3"]
    assert train_ids["final"] == train_ids["proxy"] | train_ids["x3"]


def test_inputs_hold_features_and_training_labels_but_no_test_labels(task):
    for view in VIEWS:
        train_header, train_rows = read_rows(task / "views" / view / "inputs" / "train.csv")
        test_header, test_rows = read_rows(task / "views" / view / "inputs" / "test.csv")
        assert train_header == ["id", *(f"p{i}" for i in range(64)), "label"]
        assert test_header == ["id", *(f"p{i}" for i in range(64))]
        assert all(len(row) == 65 for row in test_rows)
        assert {int(row[-1]) for row in train_rows} == set(range(10))
        # Small enough for a training of a few seconds on one thread.
        assert len(train_rows) <= 1100 and len(test_rows) <= 300
    labels = {view: true_labels(task, view) for view in VIEWS}
    assert all({label for _, label in rows} == set(range(10)) for rows in labels.values())


# ---- scorer and validator ---------------------------------------------------------------


def test_perfect_predictions_score_one_and_are_valid(task, tmp_path):
    pred = write_predictions(tmp_path / "pred", true_labels(task, "proxy"))
    out = tmp_path / "score" / "score.json"
    assert score(task, pred, "proxy", 0, out) == {"score": 1.0, "valid": True, "reason": ""}
    assert [p.name for p in out.parent.iterdir()] == ["score.json"]  # no temp file left


@pytest.mark.parametrize(
    ("content", "reason_part"),
    [
        (None, "missing"),
        ("identifier,label\n1,2\n", "first line"),
        ("id,label\n{first},seven\n", "integers"),
        ("id,label\n{first},3\n{first},3\n", "repeated"),
        ("id,label\n{first},12\n", "not 0-9"),
        ("id,label\n{first},3\n", "no prediction"),
    ],
)
def test_bad_predictions_are_invalid_with_a_reason(task, tmp_path, content, reason_part):
    pred = tmp_path / "pred"
    pred.mkdir()
    if content is not None:
        first = true_labels(task, "proxy")[0][0]
        (pred / "predictions.csv").write_text(content.format(first=first))
    result = score(task, pred, "proxy", 0, tmp_path / "score.json")
    assert result["valid"] is False and result["score"] is None
    assert reason_part in result["reason"]


def test_score_of_imperfect_predictions_depends_on_the_scoring_seed(task, tmp_path):
    truth = true_labels(task, "x3")
    # Every third prediction wrong: about 67% accuracy, varying with the resample.
    rows = [(i, (label + 1) % 10 if n % 3 == 0 else label) for n, (i, label) in enumerate(truth)]
    pred = write_predictions(tmp_path / "pred", rows)
    scores = [
        score(task, pred, "x3", seed, tmp_path / f"s{seed}.json")["score"] for seed in (0, 1, 2)
    ]
    assert all(0.55 < s < 0.8 for s in scores)
    assert len(set(scores)) > 1
    assert score(task, pred, "x3", 1, tmp_path / "again.json")["score"] == scores[1]


def test_bootstrap_scores_in_one_call_equal_one_call_per_seed(task, tmp_path):
    truth = true_labels(task, "guard")
    rows = [(i, (label + 1) % 10 if n % 4 == 0 else label) for n, (i, label) in enumerate(truth)]
    pred = write_predictions(tmp_path / "pred", rows)
    out = tmp_path / "batch.json"
    labels = task / "views" / "guard" / "labels"
    done = run_task_script(
        task, "scorer.py", pred=pred, labels=labels, seed=100, out=out, bootstrap=5
    )
    assert done.returncode == 0, done.stderr
    batch = json.loads(out.read_text())
    singles = [score(task, pred, "guard", 100 + b, tmp_path / f"b{b}.json") for b in range(5)]
    assert batch["bootstrap"] == [single["score"] for single in singles]
    assert batch["score"] == singles[0]["score"] and len(set(batch["bootstrap"])) > 1


def test_validator_accepts_good_output_and_rejects_a_missing_id(task, tmp_path):
    truth = true_labels(task, "final")
    good = validate(task, write_predictions(tmp_path / "good", truth), "final")
    assert good.returncode == 0, good.stderr

    missing = validate(task, write_predictions(tmp_path / "short", truth[1:]), "final")
    assert missing.returncode == 1
    reason = missing.stderr.strip()
    assert "missing" in reason and str(truth[0][0]) in reason and "\n" not in reason

    bad_label = validate(
        task, write_predictions(tmp_path / "ten", [(truth[0][0], 10), *truth[1:]]), "final"
    )
    assert bad_label.returncode == 1 and "not a digit" in bad_label.stderr


# ---- candidates -------------------------------------------------------------------------


def test_solution_folders_declare_weights_as_the_contract_requires():
    for name in (*CANDIDATES, "baseline"):
        folder = baseline_dir() if name == "baseline" else candidates_dir() / name
        assert (folder / "run.py").is_file(), name
        artifacts = folder / "ARTIFACTS.json"
        if name in ("mlp", "forest", "logreg"):
            declared = json.loads(artifacts.read_text())
            assert declared == [{"path": "weights/model.pkl", "sha256": None, "per_view": True}]
            assert not (folder / "weights").exists(), "weights must never ship with the source"
        else:
            assert not artifacts.exists(), name
    assert json.loads((candidates_dir() / "mlp" / "EXECUTION.json").read_text()) == {
        "seed_affects_training": False,
        "train_seed": 0,
    }
    forest = json.loads((candidates_dir() / "forest" / "EXECUTION.json").read_text())
    assert forest["seed_affects_training"] is True


def test_mlp_trains_once_then_loads_its_weights(task, tmp_path):
    view = task / "views" / "x3"
    mlp = working_copy("mlp", tmp_path)
    first = run_solution(mlp, view, tmp_path / "out0")
    assert first.returncode == 0, first.stderr
    assert "trained" in first.stderr and "loaded weights" not in first.stderr
    assert (mlp / "weights" / "model.pkl").is_file()
    assert json.loads((mlp / "progress.json").read_text())["stage"] == "done"

    before = tree_stats(mlp, skip=("progress.json",))
    replay = run_solution(mlp, view, tmp_path / "replay0")
    assert replay.returncode == 0, replay.stderr
    assert "loaded weights" in replay.stderr and "trained" not in replay.stderr
    # A replay writes nothing in its folder but progress.json.
    assert tree_stats(mlp, skip=("progress.json",)) == before
    assert validate(task, tmp_path / "replay0", "x3").returncode == 0
    same = (tmp_path / "out0" / "predictions.csv").read_bytes()
    assert (tmp_path / "replay0" / "predictions.csv").read_bytes() == same

    # The program seed moves only the test-time noise: same weights, slightly other answers.
    seed1 = run_solution(mlp, view, tmp_path / "replay1", seed=1)
    assert "loaded weights" in seed1.stderr
    assert (tmp_path / "replay1" / "predictions.csv").read_bytes() != same
    s0 = score(task, tmp_path / "out0", "x3", 0, tmp_path / "s0.json")["score"]
    s0_seed1_preds = score(task, tmp_path / "replay1", "x3", 0, tmp_path / "s1.json")["score"]
    assert abs(s0 - s0_seed1_preds) < 0.05

    # Clearly above the baseline on the same view and scoring seed.
    baseline = working_copy("baseline", tmp_path)
    done = run_solution(baseline, view, tmp_path / "base")
    assert done.returncode == 0, done.stderr
    assert not (baseline / "weights").exists()
    base = score(task, tmp_path / "base", "x3", 0, tmp_path / "sb.json")
    assert base["valid"] and s0 > base["score"] + 0.03


def test_forest_training_seed_follows_the_program_seed(task, tmp_path):
    view = task / "views" / "proxy"
    weights = []
    for seed in (0, 1):
        forest = working_copy("forest", tmp_path / f"seed{seed}")
        done = run_solution(forest, view, tmp_path / f"out{seed}", seed=seed)
        assert done.returncode == 0, done.stderr
        assert f"training seed {seed}" in done.stderr
        weights.append((forest / "weights" / "model.pkl").read_bytes())
        assert validate(task, tmp_path / f"out{seed}", "proxy").returncode == 0
    assert weights[0] != weights[1]


def test_knn_predicts_without_any_weights(task, tmp_path):
    knn = working_copy("knn", tmp_path)
    before = tree_stats(knn, skip=("progress.json",))
    done = run_solution(knn, task / "views" / "proxy", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    assert validate(task, tmp_path / "out", "proxy").returncode == 0
    assert tree_stats(knn, skip=("progress.json",)) == before
    assert not (knn / "weights").exists()


def test_logreg_ablation_trains_its_own_weights_and_predicts_differently(task, tmp_path):
    view = task / "views" / "proxy"
    plain = working_copy("logreg", tmp_path / "plain")
    ablated = working_copy("logreg", tmp_path / "ablated")
    for folder, ablate in ((plain, False), (ablated, True)):
        done = run_solution(folder, view, tmp_path / folder.parent.name, ablate=ablate)
        assert done.returncode == 0, done.stderr
        assert "trained" in done.stderr
    plain_pred = (tmp_path / "plain" / "predictions.csv").read_bytes()
    assert (tmp_path / "ablated" / "predictions.csv").read_bytes() != plain_pred
    plain_weights = (plain / "weights" / "model.pkl").read_bytes()
    assert (ablated / "weights" / "model.pkl").read_bytes() != plain_weights

    # Weights of the other variant are refused, never silently used or retrained.
    refused = run_solution(plain, view, tmp_path / "mixed", ablate=True)
    assert refused.returncode != 0 and "ablate" in refused.stderr
    assert (plain / "weights" / "model.pkl").read_bytes() == plain_weights


def test_crasher_exits_non_zero_after_starting(task, tmp_path):
    crasher = working_copy("crasher", tmp_path)
    done = run_solution(crasher, task / "views" / "proxy", tmp_path / "out")
    assert done.returncode != 0
    assert "starting" in done.stderr and "RuntimeError" in done.stderr
    assert not (tmp_path / "out" / "predictions.csv").exists()
