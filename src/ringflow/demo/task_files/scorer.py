"""Score digit predictions: accuracy on a full-size bootstrap resample of the test rows.

    python scorer.py --pred DIR --labels DIR --seed N --out FILE [--bootstrap B]

FILE receives {"score": float, "valid": bool, "reason": str}: the accuracy over n rows
drawn with replacement from the n test rows, the draw fixed by the seed (the same seed
gives the same rows, whoever's predictions are scored). With --bootstrap B it also holds
"bootstrap": the B scores that --seed N, N+1, ..., N+B-1 would give, computed in this one
call (task.yaml declares `scorer_bootstrap: true`). Bad predictions (missing file, wrong
header, unknown or repeated ids, labels that are not digits) give valid false, score
null and the reason; they never make the scorer fail. Unreadable labels are the task's
own fault: the scorer then exits 2 and writes nothing.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

PREDICTIONS_FILE = "predictions.csv"
LABELS_FILE = "test.csv"


class BadPredictions(Exception):
    """The predictions break the output format; the message says how."""


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        truth = read_labels(Path(args.labels) / LABELS_FILE)
    except (OSError, ValueError) as exc:
        print(f"scorer: cannot read the hidden labels: {exc}", file=sys.stderr)
        return 2
    try:
        predicted = read_predictions(Path(args.pred) / PREDICTIONS_FILE, set(truth))
    except BadPredictions as exc:
        result = {"score": None, "valid": False, "reason": str(exc)}
    else:
        result = {"score": bootstrap_accuracy(truth, predicted, args.seed), "valid": True,
                  "reason": ""}  # fmt: skip
        if args.bootstrap:
            result["bootstrap"] = [
                bootstrap_accuracy(truth, predicted, args.seed + b) for b in range(args.bootstrap)
            ]
    write_json_atomically(Path(args.out), result)
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pred", required=True, help="folder holding predictions.csv")
    parser.add_argument("--labels", required=True, help="folder holding the hidden test.csv")
    parser.add_argument("--seed", required=True, type=int, help="scoring seed (the resample)")
    parser.add_argument("--out", required=True, help="JSON file to write the score to")
    parser.add_argument("--bootstrap", type=int, default=0, help="also the scores of seeds "
                        "N+0..N+B-1, as 'bootstrap'")  # fmt: skip
    return parser.parse_args(argv)


def read_labels(path: Path) -> dict[int, int]:
    with path.open(newline="") as handle:
        rows = list(csv.reader(handle))
    if not rows or rows[0] != ["id", "label"]:
        raise ValueError(f"{path}: expected the header 'id,label'")
    return {int(row[0]): int(row[1]) for row in rows[1:]}


def read_predictions(path: Path, expected_ids: set[int]) -> dict[int, int]:
    """Predictions by id; any fault raises BadPredictions naming the file and line."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise BadPredictions(f"{PREDICTIONS_FILE} is missing") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadPredictions(f"{PREDICTIONS_FILE} is unreadable: {exc}") from None
    try:
        rows = list(csv.reader(text.splitlines()))
    except csv.Error as exc:
        raise BadPredictions(f"{PREDICTIONS_FILE} is not valid CSV: {exc}") from None
    if not rows or [cell.strip() for cell in rows[0]] != ["id", "label"]:
        raise BadPredictions(f"{PREDICTIONS_FILE}: the first line must be 'id,label'")
    predicted: dict[int, int] = {}
    for line_no, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        if len(row) != 2:
            raise BadPredictions(f"{PREDICTIONS_FILE} line {line_no}: expected 2 fields")
        try:
            row_id, label = int(row[0]), int(row[1])
        except ValueError:
            raise BadPredictions(
                f"{PREDICTIONS_FILE} line {line_no}: id and label must be integers"
            ) from None
        if row_id not in expected_ids:
            raise BadPredictions(f"{PREDICTIONS_FILE} line {line_no}: unknown id {row_id}")
        if row_id in predicted:
            raise BadPredictions(f"{PREDICTIONS_FILE} line {line_no}: id {row_id} repeated")
        if not 0 <= label <= 9:
            raise BadPredictions(f"{PREDICTIONS_FILE} line {line_no}: label {label} not 0-9")
        predicted[row_id] = label
    missing = expected_ids - predicted.keys()
    if missing:
        raise BadPredictions(
            f"{PREDICTIONS_FILE}: {len(missing)} test ids have no prediction "
            f"(first: {min(missing)})"
        )
    return predicted


def bootstrap_accuracy(truth: dict[int, int], predicted: dict[int, int], seed: int) -> float:
    """Accuracy over n rows drawn with replacement from the n test rows (seeded)."""
    ids = sorted(truth)
    hits = np.array([predicted[i] == truth[i] for i in ids], dtype=float)
    # A negative seed is still a seed: fold it into numpy's accepted range.
    rng = np.random.default_rng(seed % 2**63)
    chosen = rng.integers(0, len(ids), size=len(ids))
    return float(hits[chosen].mean())


def write_json_atomically(path: Path, obj: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(obj, handle, sort_keys=True)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


if __name__ == "__main__":
    sys.exit(main())
