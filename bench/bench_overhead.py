"""ringflow's overhead against bare Snakemake: N executions of a program that does nothing.

The program writes an empty predictions file; the scorer writes a constant score. Both are
run N times (default 200) and scored each time, in the same run, two ways:

- ringflow: a ring of N/2 candidate folders (copies of the program), one search view, no
  baseline, promote_top_k 0, guard disabled; Snakemake runs it up to the search target
  `runs/<ring>/selection/search.json`. Each candidate gets seed 0 and its `--ablate`
  control, so N/2 candidates are N executions and N scorings. The wall time covers the
  whole stage: locking the ring, importing the nodes, every execution and its scoring.
- bare: a Snakefile of two rules, `python run.py --seed 0 [--ablate]` in the same
  candidate folders and `python scorer.py ...` on its output, N instances each.

Same Snakemake, same profile (`profiles/local`), same cores. Targets: ringflow's wall time
at most 1.5x bare Snakemake's, and Python's start plus `import ringflow.execute` at most
30 ms more than Python's start alone (the first target was 2.5x).

The ringflow side runs its per-execution steps through the driver's resident step server
(docs/architecture.md#resident-steps); `--no-resident-steps` starts each afresh, as before.

CPU is given two ways: the rusage of each side's waited-for process tree, and the whole
machine's busy time across each side's run (/proc/stat), which also counts what the kernel
does for the run in its own threads; run it on an otherwise idle machine.

These machines' speed drifts from minute to minute, so `--rounds N` runs the pair N times,
bare and ringflow side by side each round, and reports the round with the median ratio
(every round's pair is kept in the results).

    python bench/bench_overhead.py [--executions 200] [--cores 2] [--rounds 1] [--keep]
                                   [--no-resident-steps]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import yaml

import _ring

NAME = "bench_overhead"
TARGET_RATIO = 1.5
IMPORT_TARGET_S = 0.030  # beyond Python's own start
VIEWS = ("proxy", "final")
SEARCH_VIEW = "proxy"
WARM_IMPORTS = (
    "import ringflow.cli, ringflow.execute, ringflow.scoring, ringflow.weights.keytarget, "
    "ringflow.nodes, ringflow.reporting.summary, ringflow.core.clock, snakemake.cli, snakemake.api"
)

PROGRAM = """\
import argparse, os
parser = argparse.ArgumentParser()
parser.add_argument("--seed", type=int, required=True)
parser.add_argument("--ablate", action="store_true")
parser.parse_args()
open(os.path.join(os.environ["RINGFLOW_OUTPUT_DIR"], "predictions.csv"), "w").close()
"""

SCORER = """\
import argparse, json, os
parser = argparse.ArgumentParser()
for name in ("--pred", "--labels", "--out"):
    parser.add_argument(name, required=True)
parser.add_argument("--seed", type=int, required=True)
args = parser.parse_args()
found = os.path.exists(os.path.join(args.pred, "predictions.csv"))
record = {"score": 0.0, "valid": found, "reason": "" if found else "no predictions.csv"}
tmp = args.out + ".tmp"
with open(tmp, "w") as handle:
    json.dump(record, handle)
os.replace(tmp, args.out)
"""

BARE_SNAKEFILE = """\
# Bare Snakemake: the same program and scorer as the ring, with nothing around them.
from pathlib import Path

CANDIDATES = {candidates!r}
TASK = {task!r}
PYTHON = {python!r}
NAMES = {names!r}


rule all:
    input:
        expand("bare/{{name}}/{{variant}}/score.json", name=NAMES, variant=["s0", "s0-ablate"]),


rule run:
    output:
        "bare/{{name}}/{{variant}}/output/predictions.csv",
    log:
        "bare/{{name}}/{{variant}}/run.log",
    params:
        flags=lambda w: "--ablate" if w.variant == "s0-ablate" else "",
        out=lambda w: f"{{Path.cwd()}}/bare/{{w.name}}/{{w.variant}}/output",
        log=lambda w: f"{{Path.cwd()}}/bare/{{w.name}}/{{w.variant}}/run.log",
    shell:
        "cd {{CANDIDATES}}/{{wildcards.name}} && RINGFLOW_INPUT_DIR={{TASK}}/views/proxy/inputs "
        "RINGFLOW_OUTPUT_DIR={{params.out}} {{PYTHON}} run.py --seed 0 {{params.flags}} "
        "> {{params.log}} 2>&1"


rule score:
    input:
        "bare/{{name}}/{{variant}}/output/predictions.csv",
    output:
        "bare/{{name}}/{{variant}}/score.json",
    log:
        "bare/{{name}}/{{variant}}/score.log",
    params:
        here=lambda w: f"{{Path.cwd()}}/bare/{{w.name}}/{{w.variant}}",
    shell:
        "cd {{TASK}} && {{PYTHON}} scorer.py --pred {{params.here}}/output "
        "--labels {{TASK}}/views/proxy/labels --seed 0 --out {{params.here}}/score.json "
        "> {{params.here}}/score.log 2>&1"
"""


def make_task(root: Path) -> Path:
    task = root / "task"
    for view in VIEWS:
        (task / "views" / view / "inputs").mkdir(parents=True)
        (task / "views" / view / "labels").mkdir(parents=True)
        (task / "views" / view / "inputs" / "data.txt").write_text(f"inputs of {view}\n")
        (task / "views" / view / "labels" / "truth.txt").write_text(f"labels of {view}\n")
    (task / "task.yaml").write_text(
        yaml.safe_dump(
            {
                "name": "nothing",
                "direction": "maximize",
                "scorer": "python scorer.py",
                "views": list(VIEWS),
            }
        )
    )
    (task / "scorer.py").write_text(SCORER)
    return task


def make_candidates(root: Path, count: int) -> tuple[Path, list[str]]:
    candidates = root / "candidates"
    names = [f"c{i:04d}" for i in range(count)]
    for name in names:
        (candidates / name).mkdir(parents=True)
        (candidates / name / "run.py").write_text(PROGRAM)
    return candidates, names


def run_ringflow(work: Path, task: Path, candidates: Path, cores: int, name: str = "ring") -> dict:
    ring_work = work / name
    ring_work.mkdir()
    config = _ring.overrides(
        ring_id="overhead",
        task=str(task),
        candidates=str(candidates),
        baseline=None,
        views={"search": [SEARCH_VIEW], "final": "final"},
        promote_top_k=0,
        guard={"enabled": False},
    )
    configfile = _ring.write_configfile(ring_work / "ring-config.yaml", config)
    target = "runs/overhead/selection/search.json"
    timed = _ring.snakemake(ring_work, configfile, target, cores=cores)
    ring = ring_work / "runs" / "overhead"
    results = list(_ring.results(ring).values())
    scores = [json.loads(p.read_text()) for p in ring.glob("nodes/*/exec/*/*/score.json")]
    bad = [r for r in results if r["status"] != "ok"]
    if bad:
        raise SystemExit(f"ringflow: {len(bad)} executions not ok, first: {bad[0]['reason']}")
    if not (ring / "selection" / "search.json").is_file():
        raise SystemExit("ringflow: the search target was not written")
    return {
        "wall_s": round(timed.wall_s, 2),
        "cpu_s": round(timed.cpu_s, 2),
        "machine_cpu_s": _rounded(timed.machine_cpu_s),
        "executions": len(results),
        "scored": sum(bool(s.get("scored")) for s in scores),
        "program_wall_mean_s": round(statistics.mean(r["wall_s"] for r in results), 3),
        "execute_in_process_mean_s": round(
            statistics.mean(r["ended_at"] - r["started_at"] for r in results), 3
        ),
        "sandbox_modes": sorted({r.get("sandbox", {}).get("mode", "?") for r in results}),
    }


def run_bare(
    work: Path, task: Path, candidates: Path, names: list[str], cores: int, name: str = "bare"
) -> dict:
    bare_work = work / name
    bare_work.mkdir()
    snakefile = bare_work / "Snakefile"
    snakefile.write_text(
        BARE_SNAKEFILE.format(
            candidates=str(candidates), task=str(task), python=_ring.PYTHON, names=names
        )
    )
    timed = _ring.snakemake(bare_work, None, snakefile=snakefile, cores=cores)
    scores = list(bare_work.glob("bare/*/*/score.json"))
    if len(scores) != 2 * len(names):
        raise SystemExit(f"bare: {len(scores)} scores for {2 * len(names)} runs")
    return {
        "wall_s": round(timed.wall_s, 2),
        "cpu_s": round(timed.cpu_s, 2),
        "machine_cpu_s": _rounded(timed.machine_cpu_s),
        "executions": len(scores),
    }


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 2)


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else round(a / b, 2)


def cache_bytecode(work: Path) -> str | None:
    """Let both sides cache bytecode, as an ordinary installation does; return the old setting.

    A development shell may export PYTHONDONTWRITEBYTECODE, and then every `python -m
    ringflow` job compiles ringflow from source again while the bare side's two small
    scripts hardly notice. The cache goes to the bench's temporary folder, not the tree.
    """
    inherited = os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    # Warm the cache once for everything the jobs import, outside both measurements.
    _ring.run_timed([_ring.PYTHON, "-c", WARM_IMPORTS], work)
    return inherited


def interpreter_starts() -> dict:
    """Start-up cost of one process: bare Python, Python importing ringflow's execute, and a
    job's step (`--help`: parsed, then ended) through the resident step server, which has
    imported it (docs/architecture.md#resident-steps)."""
    from ringflow.workflow.resident_client import SERVER_ENV, step_command
    from ringflow.workflow.resident_steps import start_server

    def best(argv: list[str], runs: int = 3) -> float:
        return min(_ring.run_timed([_ring.PYTHON, *argv], Path.cwd()).wall_s for _ in range(runs))

    # The rules' command for a step (its Python given by best()); parses its arguments, ends.
    step = [*step_command(_ring.PYTHON)[1:], "execute", "--help"]
    starts = {
        "python_s": round(best(["-c", "pass"]), 3),
        "python_import_execute_s": round(best(["-c", "import ringflow.cli, ringflow.execute"]), 3),
    }
    server = start_server()
    if server is not None:
        try:
            best(step, 1)  # the server's own imports
            starts["step_through_resident_server_s"] = round(best(step, 5), 3)
        finally:
            server.stop()
    os.environ.pop(SERVER_ENV, None)
    return starts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--executions",
        type=int,
        default=200,
        help="executions on each side (even: seed 0 and --ablate per folder)",
    )
    parser.add_argument("--cores", type=int, default=2, help="Snakemake --cores, both sides")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="pairs of runs, side by side; the round with the median ratio is reported",
    )
    parser.add_argument("--workdir", default=None, help="where to create the temporary folder")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument(
        "--no-resident-steps",
        action="store_true",
        help="start every step afresh, as before the resident step server "
        "(RINGFLOW_RESIDENT_STEPS=0 for the ring's driver)",
    )
    parser.add_argument(
        "--inherit-bytecode-setting",
        action="store_true",
        help="keep PYTHONDONTWRITEBYTECODE from the environment (default: "
        "cache bytecode in the temporary folder, as an installation does)",
    )
    args = parser.parse_args()
    if args.executions < 2 or args.executions % 2:
        parser.error("--executions must be an even number >= 2")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")

    if args.no_resident_steps:
        os.environ["RINGFLOW_RESIDENT_STEPS"] = "0"
    work = Path(tempfile.mkdtemp(prefix="bench-overhead-", dir=args.workdir))
    started = time.perf_counter()
    inherited = os.environ.get("PYTHONDONTWRITEBYTECODE")
    try:
        if not args.inherit_bytecode_setting:
            cache_bytecode(work)
        task = make_task(work)
        candidates, names = make_candidates(work, args.executions // 2)
        pairs = []
        for n in range(args.rounds):
            bare = run_bare(work, task, candidates, names, args.cores, f"bare-{n}")
            ringflow = run_ringflow(work, task, candidates, args.cores, f"ring-{n}")
            pairs.append((ringflow["wall_s"] / bare["wall_s"], bare, ringflow))
        starts = interpreter_starts()
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            _ring.remove_tree(work)

    ratio, bare, ringflow = sorted(pairs, key=lambda pair: pair[0])[(len(pairs) - 1) // 2]
    import_s = starts["python_import_execute_s"] - starts["python_s"]
    per_exec = {
        "ringflow_s": round(ringflow["wall_s"] / ringflow["executions"], 3),
        "bare_s": round(bare["wall_s"] / bare["executions"], 3),
    }
    record = {
        "executions": args.executions,
        "cores": args.cores,
        "ringflow": ringflow,
        "bare_snakemake": bare,
        "wall_ratio_ringflow_over_bare": round(ratio, 2),
        "rounds": [
            {
                "bare_wall_s": b["wall_s"],
                "ringflow_wall_s": r["wall_s"],
                "ratio": round(q, 2),
                "cpu_ratio": round(r["cpu_s"] / b["cpu_s"], 2),
                "machine_cpu_ratio": _ratio(r["machine_cpu_s"], b["machine_cpu_s"]),
            }
            for q, b, r in pairs
        ],
        "cpu_ratio_ringflow_over_bare": round(ringflow["cpu_s"] / bare["cpu_s"], 2),
        "machine_cpu_ratio_ringflow_over_bare": _ratio(
            ringflow["machine_cpu_s"], bare["machine_cpu_s"]
        ),
        "wall_per_execution": per_exec,
        "process_start": starts,
        "resident_steps": not args.no_resident_steps,
        "bytecode_cached": "PYTHONDONTWRITEBYTECODE" not in os.environ,
        "inherited_PYTHONDONTWRITEBYTECODE": inherited,
        "target_wall_ratio": TARGET_RATIO,
        "meets_target": ratio <= TARGET_RATIO,
        "target_import_s": IMPORT_TARGET_S,
        "meets_import_target": import_s <= IMPORT_TARGET_S,
        "bench_wall_s": round(time.perf_counter() - started, 1),
    }
    path = _ring.write_results(NAME, record)
    _ring.print_table(
        f"overhead: {args.executions} executions + scorings of a do-nothing program, "
        f"--cores {args.cores}",
        [
            ("bare Snakemake, wall (s)", f"{bare['wall_s']:.1f}", ""),
            ("ringflow up to the search target, wall (s)", f"{ringflow['wall_s']:.1f}", ""),
            ("    ratio ringflow/bare", f"{ratio:.2f}", f"<= {TARGET_RATIO}"),
            ("CPU ratio ringflow/bare", f"{record['cpu_ratio_ringflow_over_bare']:.2f}", ""),
            (
                "CPU ratio ringflow/bare, whole machine",
                f"{record['machine_cpu_ratio_ringflow_over_bare']}",
                "",
            ),
            ("wall per execution, bare (s)", f"{per_exec['bare_s']:.3f}", ""),
            ("wall per execution, ringflow (s)", f"{per_exec['ringflow_s']:.3f}", ""),
            ("ringflow: program wall, mean (s)", f"{ringflow['program_wall_mean_s']:.3f}", ""),
            (
                "ringflow: execute in-process span, mean (s)",
                f"{ringflow['execute_in_process_mean_s']:.3f}",
                "",
            ),
            ("python start (s)", f"{starts['python_s']:.3f}", ""),
            (
                "python start + import ringflow.execute (s)",
                f"{starts['python_import_execute_s']:.3f}",
                f"<= python start + {IMPORT_TARGET_S}",
            ),
            (
                "a step's start, through the resident server (s)",
                f"{starts.get('step_through_resident_server_s', float('nan')):.3f}",
                "",
            ),
        ],
    )
    if len(pairs) > 1:
        rounds = ", ".join(f"{q:.2f}" for q, _, _ in pairs)
        print(f"ratio by round: {rounds} (the median round is shown above)")
    print(
        f"resident steps: {record['resident_steps']}; "
        f"sandbox: {', '.join(ringflow['sandbox_modes'])}; bytecode cached: "
        f"{record['bytecode_cached']} (inherited PYTHONDONTWRITEBYTECODE={inherited})"
    )
    print(f"results: {path}")


if __name__ == "__main__":
    main()
