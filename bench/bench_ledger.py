"""Ledger cost on an execution's path: a ledger anchored in its store against a bare one.

Every execution appends to its ring's ledger (its result.json and score.json are hashed
into it, docs/integrity.md). An anchored append signs the line with the store's secret
and appends the new head to the store's `anchors/heads.jsonl` (one more fsynced write).
Measured in the same run, on the same filesystem: N appends to a bare ledger (no RING.json
beside it: the baseline) and N to a ring's ledger; then N deciding records written the
old way (atomic write, then a bare append) against `write_record` (atomic write and an
anchored append under the ledger's lock). Target: anchored at most 2x bare.

    python bench/bench_ledger.py [--appends 200] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from ringflow.core.jsonio import atomic_write_json
from ringflow.core.ledger import Ledger
from ringflow.core.records import write_record

RESULTS = Path(__file__).resolve().parent / "results" / "bench_ledger.json"
TARGET_RATIO = 2.0
RECORD = {"status": "ok", "score": 0.5, "events": [], "reason": "", "wall_s": 1.25}


def appends(ledger: Ledger, count: int) -> float:
    start = time.perf_counter()
    for number in range(count):
        ledger.append("execution_finished", node=f"n{number:03d}", status="ok")
    return time.perf_counter() - start


def bare_records(root: Path, count: int) -> float:
    ledger = Ledger(root / "ledger.jsonl")
    start = time.perf_counter()
    for number in range(count):
        path = root / "nodes" / f"n{number:03d}" / "result.json"
        atomic_write_json(path, RECORD)
        ledger.append("record_written", path=str(path.relative_to(root)))
    return time.perf_counter() - start


def anchored_records(root: Path, count: int) -> float:
    start = time.perf_counter()
    for number in range(count):
        write_record(root, root / "nodes" / f"n{number:03d}" / "result.json", RECORD)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appends", type=int, default=200, help="appends per measure")
    parser.add_argument("--workdir", default=None, help="where to create the ledgers")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-ledger-", dir=args.workdir))
    try:
        bare, ring = work / "bare", work / "ring"
        bare.mkdir()
        ring.mkdir()
        lock = {"ring_id": "bench", "store": str(work / "store")}
        (ring / "RING.json").write_text(json.dumps(lock))
        bare_s = appends(Ledger(bare / "ledger.jsonl"), args.appends)
        anchored_s = appends(Ledger(ring / "ledger.jsonl"), args.appends)
        assert Ledger(ring / "ledger.jsonl").verify() == []
        (bare / "records").mkdir()
        (ring / "records").mkdir()
        shutil.copy(ring / "RING.json", ring / "records" / "RING.json")
        records_bare_s = bare_records(bare / "records", args.appends)
        records_anchored_s = anchored_records(ring / "records", args.appends)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    per = 1000 / args.appends
    result = {
        "appends": args.appends,
        "bare_append_ms": round(bare_s * per, 3),
        "anchored_append_ms": round(anchored_s * per, 3),
        "append_ratio": round(anchored_s / bare_s, 3),
        "bare_record_ms": round(records_bare_s * per, 3),
        "anchored_record_ms": round(records_anchored_s * per, 3),
        "record_ratio": round(records_anchored_s / records_bare_s, 3),
        "target_ratio": TARGET_RATIO,
    }
    result["meets_target"] = max(result["append_ratio"], result["record_ratio"]) <= TARGET_RATIO
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{args.appends} ledger appends and deciding records, bare against anchored")
    print(f"{'measure':<40}{'value':>10}  target")
    rows = [
        ("bare append (ms)", f"{result['bare_append_ms']:.3f}", ""),
        ("anchored append (ms)", f"{result['anchored_append_ms']:.3f}", ""),
        ("    ratio", f"{result['append_ratio']:.3f}", f"<= {TARGET_RATIO}"),
        ("record: write + bare append (ms)", f"{result['bare_record_ms']:.3f}", ""),
        ("record: write_record, anchored (ms)", f"{result['anchored_record_ms']:.3f}", ""),
        ("    ratio", f"{result['record_ratio']:.3f}", f"<= {TARGET_RATIO}"),
    ]
    for name, value, target in rows:
        print(f"{name:<40}{value:>10}  {target}")
    print(f"results: {RESULTS}")


if __name__ == "__main__":
    main()
