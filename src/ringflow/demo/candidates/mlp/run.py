"""Digits with a small multilayer perceptron and seeded test-time noise averaging.

    python run.py --seed N [--ablate]

Weights: weights/model.pkl, trained with the training seed from EXECUTION.json when
absent, loaded when present. The program seed drives only the test-time noise, so
seeds differ slightly with the same weights. --ablate turns the noise averaging off.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pickle
import sys
import tempfile
from pathlib import Path

import numpy as np

WEIGHTS_FILE = Path("weights/model.pkl")  # as declared in ARTIFACTS.json
NOISE_COPIES = 8
NOISE_SCALE = 0.08  # in units of the 0..1 grey level


def main() -> int:
    args = parse_args()
    input_dir, output_dir = required_dir("RINGFLOW_INPUT_DIR"), required_dir("RINGFLOW_OUTPUT_DIR")
    report_progress("loading data")
    train_x, train_y, test_ids, test_x = load_view(input_dir)
    if WEIGHTS_FILE.exists():
        model = pickle.loads(WEIGHTS_FILE.read_bytes())
        print(f"loaded weights from {WEIGHTS_FILE}", file=sys.stderr)
    else:
        seed = training_seed(args.seed)
        report_progress("training", training_seed=seed)
        model = train(train_x, train_y, seed)
        write_atomically(WEIGHTS_FILE, pickle.dumps(model))
        print(f"trained with training seed {seed}, wrote {WEIGHTS_FILE}", file=sys.stderr)
    report_progress("predicting")
    if args.ablate:
        probabilities = model.predict_proba(test_x)
    else:
        probabilities = noisy_average(model, test_x, np.random.default_rng(args.seed))
    labels = model.classes_[probabilities.argmax(axis=1)]
    write_predictions(output_dir, test_ids, labels)
    report_progress("done")
    return 0


def train(x: np.ndarray, y: np.ndarray, seed: int):
    from sklearn.neural_network import MLPClassifier

    model = MLPClassifier(hidden_layer_sizes=(128,), alpha=1e-3, max_iter=400, random_state=seed)
    return model.fit(x, y)


def noisy_average(model, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Mean class probabilities over a few copies of the inputs with small pixel noise."""
    total = np.zeros((len(x), len(model.classes_)))
    for _ in range(NOISE_COPIES):
        total += model.predict_proba(np.clip(x + rng.normal(0, NOISE_SCALE, x.shape), 0, 1))
    return total / NOISE_COPIES


# ---- the plumbing every demo candidate shares --------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--ablate", action="store_true")
    return parser.parse_args()


def required_dir(variable: str) -> Path:
    value = os.environ.get(variable)
    if not value:
        sys.exit(f"run.py: environment variable {variable} is not set")
    return Path(value)


def training_seed(program_seed: int) -> int:
    """train_seed from EXECUTION.json, or the program seed when it affects training."""
    path = Path("EXECUTION.json")
    spec = json.loads(path.read_text()) if path.exists() else {}
    if spec.get("seed_affects_training", False):
        return program_seed
    return int(spec.get("train_seed", 0))


def load_view(input_dir: Path):
    train = np.loadtxt(input_dir / "train.csv", delimiter=",", skiprows=1, dtype=np.int64, ndmin=2)
    test = np.loadtxt(input_dir / "test.csv", delimiter=",", skiprows=1, dtype=np.int64, ndmin=2)
    return train[:, 1:-1] / 16.0, train[:, -1], test[:, 0], test[:, 1:] / 16.0


def write_predictions(output_dir: Path, ids: np.ndarray, labels: np.ndarray) -> None:
    lines = ["id,label", *(f"{i},{label}" for i, label in zip(ids, labels, strict=True))]
    write_atomically(output_dir / "predictions.csv", ("\n".join(lines) + "\n").encode())


def report_progress(stage: str, **fields) -> None:
    """Best effort: progress.json is written in place, as its folder may be read-only."""
    path = os.environ.get("RINGFLOW_PROGRESS_FILE")
    if path:
        with contextlib.suppress(OSError):
            Path(path).write_text(json.dumps({"stage": stage, **fields}))


def write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


if __name__ == "__main__":
    sys.exit(main())
