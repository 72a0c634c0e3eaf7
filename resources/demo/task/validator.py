"""Check a digits prediction folder against the public inputs of its view.

    python validator.py --pred DIR --inputs DIR

Exit 0 when DIR/predictions.csv has the header 'id,label', every test id of
inputs/test.csv exactly once and nothing else, and integer labels 0-9. Otherwise exit 1
with a one-line reason on stderr.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

PREDICTIONS_FILE = "predictions.csv"


class Invalid(Exception):
    """The predictions break the output format; the message says how."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pred", required=True, help="folder holding predictions.csv")
    parser.add_argument("--inputs", required=True, help="the view's public inputs folder")
    args = parser.parse_args(argv)
    try:
        expected = read_test_ids(Path(args.inputs) / "test.csv")
    except (OSError, ValueError) as exc:
        print(f"cannot read the view's test ids: {exc}", file=sys.stderr)
        return 1
    try:
        check_predictions(Path(args.pred) / PREDICTIONS_FILE, expected)
    except Invalid as exc:
        print(str(exc), file=sys.stderr)
        return 1
    return 0


def read_test_ids(path: Path) -> list[int]:
    with path.open(newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if not header or header[0] != "id":
            raise ValueError(f"{path}: the first column must be 'id'")
        return [int(row[0]) for row in reader if row]


def check_predictions(path: Path, expected: list[int]) -> None:
    try:
        rows = list(csv.reader(path.read_text().splitlines()))
    except FileNotFoundError:
        raise Invalid(f"{PREDICTIONS_FILE} is missing") from None
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise Invalid(f"{PREDICTIONS_FILE} is unreadable: {exc}") from None
    if not rows or [cell.strip() for cell in rows[0]] != ["id", "label"]:
        raise Invalid(f"{PREDICTIONS_FILE}: the first line must be 'id,label'")
    expected_ids = set(expected)
    seen: set[int] = set()
    for line_no, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        if len(row) != 2:
            raise Invalid(f"{PREDICTIONS_FILE} line {line_no}: expected 2 fields, got {len(row)}")
        try:
            row_id, label = int(row[0]), int(row[1])
        except ValueError:
            raise Invalid(
                f"{PREDICTIONS_FILE} line {line_no}: id and label must be integers"
            ) from None
        if row_id not in expected_ids:
            raise Invalid(f"{PREDICTIONS_FILE} line {line_no}: id {row_id} is not a test id")
        if row_id in seen:
            raise Invalid(f"{PREDICTIONS_FILE} line {line_no}: id {row_id} appears twice")
        if not 0 <= label <= 9:
            raise Invalid(f"{PREDICTIONS_FILE} line {line_no}: label {label} is not a digit 0-9")
        seen.add(row_id)
    missing = expected_ids - seen
    if missing:
        raise Invalid(
            f"{PREDICTIONS_FILE}: {len(missing)} test ids missing, for example id {min(missing)}"
        )


if __name__ == "__main__":
    sys.exit(main())
