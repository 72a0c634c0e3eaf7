"""A candidate that fails on purpose: it starts, reads its inputs, then raises.

    python run.py --seed N [--ablate]

It exists so that the demo exercises the crash path of an execution.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--ablate", action="store_true")
    args = parser.parse_args()
    print(f"starting with seed {args.seed}", file=sys.stderr, flush=True)
    train_file = Path(os.environ.get("RINGFLOW_INPUT_DIR", ".")) / "train.csv"
    rows = train_file.read_text().count("\n") if train_file.exists() else 0
    raise RuntimeError(f"deliberate failure after reading {rows} lines of {train_file.name}")


if __name__ == "__main__":
    sys.exit(main())
