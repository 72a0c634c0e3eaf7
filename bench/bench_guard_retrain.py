"""The guard stage with guard.retrain against without, on the demo ring.

With `guard.retrain: true` each guard run of the finalists and the baseline trains its
own weights instead of replaying the one training per guard view, so the guard stage
costs more. This bench runs the demo ring both ways and reports the guard runs' summed
wall time and their span (first start to last end), the ratio of the two rings, and
what the reserve set aside for the guard stage in each (final_timing.json), so that a
reserve that does not price the retraining shows.

Measured (2 shared cores): 10 guard runs each; with retrain 5 of them train (the demo's
baseline has no weights), span 21.5 s against 13.1 s, a ratio of 1.65; the reserve set
aside 70 s and 93 s for the guard stage, more than either took.

    python bench/bench_guard_retrain.py [--keep]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import _ring

NAME = "bench_guard_retrain"


def run_demo(work: Path, retrain: bool) -> Path:
    ring_id = "retrain" if retrain else "replay"
    folder = work / ring_id
    folder.mkdir(parents=True)
    config = _ring.write_configfile(
        folder / "config.yaml",
        _ring.overrides(ring_id=ring_id, guard={"retrain": retrain}),
    )
    _ring.snakemake(folder, config)
    return folder / "runs" / ring_id


def guard_stage(ring: Path) -> dict:
    runs = [r for (_, _, variant), r in _ring.results(ring).items()
            if variant.startswith("g") and variant[1:].isdigit()]  # fmt: skip
    started = [r["started_at"] for r in runs if r.get("started_at")]
    ended = [r["started_at"] + r.get("wall_s", 0.0) for r in runs if r.get("started_at")]
    timing = ring / "final_timing.json"
    stage = {}
    if timing.exists():
        stages = json.loads(timing.read_text()).get("stages") or []
        stage = next((s for s in stages if s.get("stage") == "guard"), {})
    return {
        "ring": str(ring),
        "runs": len(runs),
        "trained": sum(1 for r in runs if r.get("weights_mode") == "train"),
        "wall_s": sum(r.get("wall_s", 0.0) for r in runs),
        "span_s": (max(ended) - min(started)) if started else 0.0,
        "reserved_s": stage.get("reserved_s"),
        "actual_s": stage.get("actual_s"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the bench folder")
    args = parser.parse_args()
    with _ring.scratch_folder("ringflow-bench-guard-retrain-", args.keep) as work:
        replay, retrain = (guard_stage(run_demo(work, r)) for r in (False, True))
    ratio = retrain["span_s"] / replay["span_s"] if replay["span_s"] else None
    rows = []
    for name, row in (("replay", replay), ("retrain", retrain)):
        reserved = "-" if row["reserved_s"] is None else f"{row['reserved_s']:.1f} s"
        rows.append((f"{name}: guard runs (trained)", f"{row['runs']} ({row['trained']})", ""))
        rows.append((f"{name}: wall / span", f"{row['wall_s']:.1f} / {row['span_s']:.1f} s", ""))
        rows.append((f"{name}: reserved for the guard", reserved, ">= span"))
    rows.append(("span ratio retrain / replay", "-" if ratio is None else f"{ratio:.2f}", ""))
    _ring.print_table("Guard stage with and without guard.retrain (demo ring)", rows)
    path = _ring.write_results(NAME, {"replay": replay, "retrain": retrain, "ratio": ratio})
    print(f"results: {path}")


if __name__ == "__main__":
    main()
