"""Digits with k nearest neighbours, fitted on the fly: no weights at all.

    python run.py --seed N [--ablate]

The seed and --ablate are accepted and change nothing: the method has no randomness.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

NEIGHBOURS = 3


def main() -> int:
    parse_args()
    input_dir, output_dir = required_dir("RINGFLOW_INPUT_DIR"), required_dir("RINGFLOW_OUTPUT_DIR")
    train_x, train_y, test_ids, test_x = load_view(input_dir)
    from sklearn.neighbors import KNeighborsClassifier

    model = KNeighborsClassifier(n_neighbors=NEIGHBOURS).fit(train_x, train_y)
    report_progress("predicting")
    write_predictions(output_dir, test_ids, model.predict(test_x))
    print("fitted on the fly, no weights", file=sys.stderr)
    report_progress("done")
    return 0


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
