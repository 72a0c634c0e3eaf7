"""Reserve accuracy: what final selection was reserved against the time it took.

Every ring records in final_timing.json the estimate of final selection taken when its
search ended (the stage shares, priced from measured executions) and the time final
selection then took (search end to decision). The reserve the ring sets aside is that
estimate plus `reserve_pad_min`. Targets, on every ring:

- the actual final-selection time never exceeds the reserve (estimate + pad);
- the reserve exceeds the actual by at most reserve_pad_min + 25 % of the actual.

Per stage it also lists what the reserve's prices came to for the executions that ran
("priced", final_timing.json's `priced_ran_s`): the reserve holds the worst case (every
finalist reviewed and guarded), so where the first finalist passes, reserved exceeds
actual by the runs never needed, while priced against actual tells how well runs were
priced.

Rings: the demo ring and the test suite's rings of the measured-time tests (a trained
candidate whose seed 0 only replays and whose cold start trains slowly; two trained
finalists), run here through Snakemake, plus any finished ring folders given.

    python bench/bench_reserve.py [RING_DIR ...] [--no-run] [--keep]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import _ring

sys.path.insert(0, str(_ring.REPO / "tests"))
import ringtools  # the test suite's scripted task and candidates

NAME = "bench_reserve"
SLACK = 0.25


def run_ring(work: Path, ring_id: str, **overrides) -> Path:
    work.mkdir(parents=True, exist_ok=True)
    config = _ring.write_configfile(
        work / f"{ring_id}.yaml", _ring.overrides(ring_id=ring_id, **overrides)
    )
    _ring.snakemake(work, config)
    return work / "runs" / ring_id


def demo_ring(work: Path) -> Path:
    return run_ring(work / "demo", "demo")


def slow_cold_start_ring(work: Path) -> Path:
    """As in tests/e2e/test_measured_time_e2e.py: seed 0 replays, every training takes 4 s."""
    work = work / "cold"
    cands = work / "cands"
    ringtools.make_candidate(cands / "slow", mean=0.6, weights=True, train_sleep=4)
    base = ringtools.make_candidate(work / "base" / "baseline", mean=0.5)
    earlier = ringtools.locked_ring(work, cands, "earlier")
    for view in ("proxy", "x3"):
        _ring.ringflow(work, "execute", str(earlier), "n001-slow", view, "s0")
    return run_ring(
        work, "cold", task=str(ringtools.make_task(work)), candidates=str(cands), baseline=str(base)
    )


def two_finalists_ring(work: Path) -> Path:
    """Two trained finalists (the first fails its guard) and a baseline that trains."""
    work = work / "two"
    cands = work / "cands"
    ringtools.make_candidate(cands / "a", mean=0.52, sd=0.05, weights=True, train_sleep=1)
    ringtools.make_candidate(cands / "b", mean=0.51, sd=0.05, weights=True, sleep=0.5)
    ringtools.make_candidate(cands / "c", mean=0.3, sleep=0.2)
    base = ringtools.make_candidate(work / "base" / "baseline", mean=0.5, sd=0.05, weights=True)
    return run_ring(
        work,
        "two",
        task=str(ringtools.make_task(work)),
        candidates=str(cands),
        baseline=str(base),
        promote_top_k=3,
        final_top_k=2,
    )


def accuracy(ring: Path) -> dict:
    timing = json.loads((ring / "final_timing.json").read_text())
    whole = timing["final_selection"]
    if not whole["complete"] or whole["reserved_s"] is None:
        raise SystemExit(f"{ring}: final selection not finished, or nothing was reserved")
    pad_s = whole["pad_min"] * 60
    reserve_s = whole["reserved_s"] + pad_s
    actual_s = whole["actual_s"]
    return {
        "ring": str(ring),
        "estimate_s": whole["reserved_s"],
        "pad_s": pad_s,
        "reserve_s": reserve_s,
        "actual_s": actual_s,
        "covered": actual_s <= reserve_s,
        "within_slack": reserve_s - actual_s <= pad_s + SLACK * actual_s,
        "stages": {
            row["stage"]: {key: row.get(key) for key in ("reserved_s", "priced_ran_s", "actual_s")}
            for row in timing["stages"]
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rings", nargs="*", help="finished ring folders to include")
    parser.add_argument("--no-run", action="store_true", help="only the rings given")
    parser.add_argument("--keep", action="store_true", help="keep the bench folder")
    args = parser.parse_args()
    rings = [Path(r) for r in args.rings]
    with _ring.scratch_folder("ringflow-bench-reserve-", args.keep) as work:
        if not args.no_run:
            rings += [demo_ring(work), slow_cold_start_ring(work), two_finalists_ring(work)]
        rows = [accuracy(ring) for ring in rings]
    table = []
    for row in rows:
        name = Path(row["ring"]).name
        table.append(
            (
                f"{name}: actual / reserve (estimate + pad)",
                f"{row['actual_s']:.1f} / {row['reserve_s']:.1f} s",
                "actual <= reserve",
            )
        )
        table.append(
            (
                f"{name}: reserve - actual, beyond the pad",
                f"{row['reserve_s'] - row['actual_s'] - row['pad_s']:+.1f} s",
                f"<= {SLACK:.0%} of actual ({SLACK * row['actual_s']:.1f} s)",
            )
        )
        for stage, times in row["stages"].items():
            reserved, priced = (
                "-" if times[key] is None else f"{times[key]:.1f}"
                for key in ("reserved_s", "priced_ran_s")
            )
            table.append(
                (f"  {stage}: reserved / priced / actual",
                 f"{reserved} / {priced} / {times['actual_s']:.1f} s", "")
            )  # fmt: skip
    _ring.print_table("Reserve accuracy (final selection)", table)
    passed = all(row["covered"] and row["within_slack"] for row in rows)
    path = _ring.write_results(NAME, {"rings": rows, "passed": passed})
    print(f"results: {path}")
    if not passed:
        raise SystemExit("reserve accuracy target missed")


if __name__ == "__main__":
    main()
