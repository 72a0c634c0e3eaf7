"""The view check before (and after) every execution: a view of N files, unchanged.

    python bench/bench_view_check.py [--files 1000] [--runs 50]

Measures `ring.inputs.check_inputs` on a lock-time snapshot against a bare walk that
only lstat()s the same files, in the same run. Target: at most 10 ms for 1,000 files.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import _ring  # noqa: E402
from ringflow.core.hashing import listing  # noqa: E402
from ringflow.ring.inputs import check_inputs, record_snapshot, take_snapshot  # noqa: E402

NAME = "bench_view_check"
TARGET_MS = 10.0


def bare_walk(folder: Path) -> int:
    count = 0
    for dirpath, _, filenames in os.walk(folder):
        for name in filenames:
            os.lstat(os.path.join(dirpath, name))
            count += 1
    return count


def median_ms(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        source = Path(scratch) / "inputs"
        for i in range(args.files):
            folder = source / f"part{i % 10}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"rows{i}.csv").write_text(f"id,x\n{i},{i * 0.5}\n")
        snapshot = Path(scratch) / "snapshot"
        take_snapshot(source, snapshot, world_readable=False)
        hashes = {entry["path"]: entry["sha256"] for entry in listing(source)}
        records = record_snapshot(source, snapshot, hashes)
        assert check_inputs(snapshot, records) is None
        walk_ms = median_ms(lambda: bare_walk(snapshot), args.runs)
        check_ms = median_ms(lambda: check_inputs(snapshot, records), args.runs)
    record = {
        "files": args.files,
        "runs": args.runs,
        "check_median_ms": round(check_ms, 2),
        "bare_walk_median_ms": round(walk_ms, 2),
        "ratio": round(check_ms / walk_ms, 2),
        "target_ms": TARGET_MS,
        "met": check_ms <= TARGET_MS,
    }
    _ring.write_results(NAME, record)
    print(
        f"view check, {args.files} files (median of {args.runs}): {check_ms:.2f} ms; a bare "
        f"lstat walk {walk_ms:.2f} ms ({record['ratio']}x); target <= {TARGET_MS:.0f} ms"
    )
    return 0 if record["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
