"""How long Snakemake takes to plan a ring of N nodes (the search must not be bounded by it).

For each N (default 200 and 2,000) a ring of N candidate folders over a scripted task
(two search views, no baseline) is locked and imported (`--until import_nodes`), then
planned as a whole with a dry run (`snakemake -n`): every node's seed-0 and ablation
executions on both views, the first search generation's checkpoint and the rest of the
ring. The dry run's wall time is what each new Snakemake start (and, roughly, each DAG
update after a checkpoint) costs at that size. No target is set; the figures go to the
benchmark table in docs/benchmarks.md.

    python bench/bench_search_planning.py [--nodes 200 2000] [--keep]
"""

from __future__ import annotations

import argparse
import re
import shutil
import tempfile
from pathlib import Path

import _ring

NAME = "bench_search_planning"
PROGRAM = "open(__import__('os').environ['RINGFLOW_OUTPUT_DIR'] + '/p.csv', 'w').close()\n"
SCORER = """\
import argparse, json
p = argparse.ArgumentParser()
for a in ("--pred", "--labels", "--out", "--seed"):
    p.add_argument(a)
json.dump({"score": 0.0, "valid": True, "reason": ""}, open(p.parse_args().out, "w"))
"""


def make_ring_inputs(root: Path, nodes: int) -> Path:
    task = root / "task"
    (task / "views").mkdir(parents=True)
    (task / "task.yaml").write_text(
        "name: plan\ndirection: maximize\nscorer: python scorer.py\nviews: [proxy, x3, final]\n"
    )
    (task / "scorer.py").write_text(SCORER)
    for view in ("proxy", "x3", "final"):
        for part in ("inputs", "labels"):
            (task / "views" / view / part).mkdir(parents=True)
            (task / "views" / view / part / "data.txt").write_text(f"{view} {part}\n")
    for i in range(nodes):
        folder = root / "cands" / f"c{i:05d}"
        folder.mkdir(parents=True)
        (folder / "run.py").write_text(PROGRAM)
    return _ring.write_configfile(
        root / "config.yaml",
        _ring.overrides(
            ring_id="plan", task=str(task), candidates=str(root / "cands"), baseline=None
        ),
    )


def measure(nodes: int, keep: bool) -> dict:
    root = Path(tempfile.mkdtemp(prefix=f"{NAME}-{nodes}-"))
    try:
        config = make_ring_inputs(root, nodes)
        imported = _ring.snakemake(root, config, "--until", "import_nodes")
        planned = _ring.snakemake(root, config, "-n", "--quiet", "rules")
        counts = dict(re.findall(r"^(\w+)\s+(\d+)$", planned.stdout, re.M))
        return {"nodes": nodes, "import_s": round(imported.wall_s, 2),
                "plan_s": round(planned.wall_s, 2), "planned_jobs": int(counts["total"]),
                "planned_executions": int(counts["execute"])}  # fmt: skip
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[200, 2000])
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    rows = [measure(n, args.keep) for n in args.nodes]
    for row in rows:
        print(f"{row['nodes']:>6} nodes: dry run {row['plan_s']:.1f} s for "
              f"{row['planned_jobs']} jobs (import {row['import_s']:.1f} s)")  # fmt: skip
    print(f"wrote {_ring.write_results(NAME, {'rows': rows})}")


if __name__ == "__main__":
    main()
