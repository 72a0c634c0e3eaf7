"""Digits with standardised pixels and multinomial logistic regression.

    python run.py --seed N [--ablate]

Weights: weights/model.pkl, trained with train_seed from EXECUTION.json when absent.
--ablate keeps only the left half of each image (32 of 64 pixels); the ablation control
therefore trains and replays its own weights, and a weights file made by the other
variant is refused rather than silently used.
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
LEFT_HALF = np.array([row * 8 + col for row in range(8) for col in range(4)])


def main() -> int:
    args = parse_args()
    input_dir, output_dir = required_dir("RINGFLOW_INPUT_DIR"), required_dir("RINGFLOW_OUTPUT_DIR")
    report_progress("loading data")
    train_x, train_y, test_ids, test_x = load_view(input_dir)
    if args.ablate:
        train_x, test_x = train_x[:, LEFT_HALF], test_x[:, LEFT_HALF]
    if WEIGHTS_FILE.exists():
        saved = pickle.loads(WEIGHTS_FILE.read_bytes())
        if saved["ablate"] != args.ablate:
            sys.exit(
                f"run.py: {WEIGHTS_FILE} was trained with ablate={saved['ablate']}, "
                f"this run has ablate={args.ablate}"
            )
        model = saved["model"]
        print(f"loaded weights from {WEIGHTS_FILE}", file=sys.stderr)
    else:
        seed = training_seed(args.seed)
        report_progress("training", training_seed=seed)
        model = train(train_x, train_y, seed)
        write_atomically(WEIGHTS_FILE, pickle.dumps({"ablate": args.ablate, "model": model}))
        print(f"trained with training seed {seed}, wrote {WEIGHTS_FILE}", file=sys.stderr)
    report_progress("predicting")
    write_predictions(output_dir, test_ids, model.predict(test_x))
    report_progress("done")
    return 0


def train(x: np.ndarray, y: np.ndarray, seed: int):
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    classifier = LogisticRegression(C=0.5, max_iter=2000, random_state=seed)
    return make_pipeline(StandardScaler(), classifier).fit(x, y)


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
