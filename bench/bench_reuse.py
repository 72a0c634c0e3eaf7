"""Compute saved by weights reuse: one trained candidate through s0, s1, s2 and five guard seeds.

A trained candidate runs the eight executions of one node on one search view (s0, s1, s2,
g3..g7) with `python -m ringflow step execute`, in order, twice in the same run:

- with reuse: one ring and one store; s0 trains and registers, the seven others replay;
- without reuse: the same eight executions, each in a ring of its own with an empty store,
  so each one trains (see `run_without_reuse` for why this is the honest baseline).

The demo `mlp` trains in well under a second while a Python + scikit-learn start costs
about a second per execution, so its ratio would measure interpreter start-up. The bench
therefore runs its own candidate: a copy of the demo `mlp` whose only change is a wider
network trained for a fixed number of epochs (see `--hidden`, `--epochs`), a few seconds
on one thread. Target: at least 3x less execution CPU with reuse.

Then a whole demo ring runs through Snakemake (limits.threads 1, short health sampling)
and its trainings are counted against the distinct keys they trained: equal means no key
was trained twice.

    python bench/bench_reuse.py [--hidden 512,256] [--epochs 300] [--no-ring] [--keep]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import time
from pathlib import Path

import _ring
from ringflow.core.state import Ring
from ringflow.demo import candidates_dir, materialise_task
from ringflow.nodes import import_static
from ringflow.ring.lock import lock_ring

NAME = "bench_reuse"
TARGET_RATIO = 3.0
CANDIDATE = "mlp-wide"
TRAIN_LINE = re.compile(r"^(\s*)model = MLPClassifier\(.*\)\s*$", re.MULTILINE)


def make_candidate(dest: Path, hidden: tuple[int, ...], epochs: int) -> Path:
    """A copy of the demo mlp whose training is wider and runs exactly `epochs` epochs."""
    folder = Path(shutil.copytree(candidates_dir() / "mlp", dest / CANDIDATE))
    run_py = folder / "run.py"
    source = run_py.read_text()
    # tol=0 with n_iter_no_change past the last epoch: no early stop, so the training
    # cost is fixed by the epoch count and does not depend on when the loss flattens.
    replacement = (
        rf"\1model = MLPClassifier(hidden_layer_sizes={hidden!r}, alpha=1e-3, "
        rf"max_iter={epochs}, tol=0.0, n_iter_no_change={epochs + 1}, random_state=seed)"
    )
    patched, count = TRAIN_LINE.subn(replacement, source)
    if count != 1:
        raise SystemExit(
            f"{run_py}: expected one 'model = MLPClassifier(...)' line to widen, "
            f"found {count}; the demo mlp changed, update {__file__}"
        )
    run_py.write_text(patched)
    (folder / "METHOD.md").write_text(
        f"# {CANDIDATE}\n\nThe demo mlp with hidden layers {hidden} trained for exactly "
        f"{epochs} epochs: a benchmark candidate whose training dominates its run time.\n"
    )
    return folder


def new_ring(
    work: Path, task: Path, candidates: Path, ring_id: str, store: Path
) -> tuple[Ring, str]:
    """A locked ring with its one ready node, and that node's id."""
    config = _ring.full_config(
        ring_id=ring_id,
        task=str(task),
        candidates=str(candidates),
        baseline=None,
        store=str(store),
        runs_dir=str(work / "runs"),
        resources_dir=str(work / "resources"),
        # Guard seeds on the search view measured here, not on the demo's guard view.
        views={"search": [], "guard": [], "final": None},
    )
    ring = lock_ring(config, work)
    index = import_static(ring)
    ready = [n["id"] for n in index["nodes"] if n["status"] == "ready"]
    if len(ready) != 1:
        raise SystemExit(f"ring {ring_id}: expected one ready node, got {index['nodes']}")
    return ring, ready[0]


def execute(work: Path, ring: Ring, node: str, view: str, variant: str) -> dict:
    """One execution as the workflow's rule runs it; its result plus the command's cost."""
    timed = _ring.ringflow(work, "execute", ring.ring_dir, node, view, variant)
    exec_result = json.loads(
        (Path(ring.ring_dir) / "nodes" / node / "exec" / view / variant / "result.json").read_text()
    )
    if exec_result["status"] != "ok":
        raise SystemExit(
            f"{ring.ring_id} {node} {view}/{variant}: {exec_result['status']}: "
            f"{exec_result['reason']}"
        )
    return {
        "variant": variant,
        "weights_mode": exec_result["weights_mode"],
        "weights_key": exec_result["weights_key"],
        "cpu_s": exec_result["cpu_s"],
        "wall_s": exec_result["wall_s"],
        "command_cpu_s": round(timed.cpu_s, 3),
        "command_wall_s": round(timed.wall_s, 3),
    }


def run_without_reuse(work: Path, task: Path, candidates: Path, variant: str, view: str) -> dict:
    """The execution `variant` with nothing to replay: a ring of its own over an empty store.

    Everything else is the same as with reuse: the same submission (so the same tree hash
    and weights key), the same variant, seed, arguments, sandbox and supervisor; only the
    key lookup misses, so the program takes its training branch. `fresh-s0` would not do:
    it exists for seed 0 only, and s1, s2 and the guard seeds are the executions that
    reuse saves. The throwaway registration after training costs the ringflow process a
    hash of the weights file; it is outside the program's cpu_s that the target compares.
    """
    ring, node = new_ring(work, task, candidates, f"noreuse-{variant}", work / f"store-{variant}")
    return execute(work, ring, node, view, variant)


def sums(rows: list[dict]) -> dict:
    return {
        k: round(sum(r[k] for r in rows), 3)
        for k in ("cpu_s", "wall_s", "command_cpu_s", "command_wall_s")
    }


def ring_trainings(work: Path) -> dict:
    """A whole demo ring through Snakemake; trainings against the distinct keys trained."""
    ring_work = work / "demo-ring"
    ring_work.mkdir()
    configfile = _ring.write_configfile(ring_work / "ring-config.yaml", _ring.overrides())
    timed = _ring.snakemake(ring_work, configfile)
    results = _ring.results(ring_work / "runs" / "demo")
    trained = [r for r in results.values() if r["weights_mode"] == "train"]
    keys = {r["weights_key"] for r in trained}
    registered = list((ring_work / "store" / "per_view").glob("*/*.json"))
    return {
        "wall_s": round(timed.wall_s, 1),
        "executions": len(results),
        "trainings": len(trained),
        "distinct_keys_trained": len(keys),
        "replays": sum(r["weights_mode"] == "replay" for r in results.values()),
        "keys_registered": len(registered),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--hidden",
        default="512,256",
        help="hidden layer sizes of the bench candidate (comma-separated)",
    )
    parser.add_argument("--epochs", type=int, default=300, help="training epochs, fixed")
    parser.add_argument("--no-ring", action="store_true", help="skip the whole demo ring")
    parser.add_argument("--workdir", default=None, help="where to create the temporary folder")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()
    hidden = tuple(int(h) for h in args.hidden.split(","))

    started = time.perf_counter()
    with _ring.scratch_folder("bench-reuse-", args.keep, args.workdir) as work:
        task = materialise_task(work / "task")
        candidates = work / "candidates"
        make_candidate(candidates, hidden, args.epochs)
        ring, node = new_ring(work, task, candidates, "reuse", work / "store-reuse")
        view = ring.search_views[0]
        variants = ["s0", "s1", "s2", *(f"g{seed}" for seed in ring.guard_seeds)]
        with_reuse, without_reuse = [], []
        # Alternated, so a drift in the machine's load falls on both sides alike.
        for variant in variants:
            with_reuse.append(execute(work, ring, node, view, variant))
            without_reuse.append(run_without_reuse(work, task, candidates, variant, view))
        demo_ring = None if args.no_ring else ring_trainings(work)

    problems = []
    modes = [r["weights_mode"] for r in with_reuse]
    trainings = modes.count("train")
    if modes != ["train"] + ["replay"] * (len(variants) - 1):
        problems.append(f"with reuse: expected s0 to train and the rest to replay, got {modes}")
    if any(r["weights_mode"] != "train" for r in without_reuse):
        problems.append(
            "without reuse: every execution must train, got "
            f"{[r['weights_mode'] for r in without_reuse]}"
        )
    if any(
        a["weights_key"] != b["weights_key"] for a, b in zip(with_reuse, without_reuse, strict=True)
    ):
        problems.append("the two sides ran under different weights keys")
    if demo_ring and demo_ring["trainings"] != demo_ring["distinct_keys_trained"]:
        problems.append(
            f"demo ring: {demo_ring['trainings']} trainings for "
            f"{demo_ring['distinct_keys_trained']} distinct keys"
        )

    reuse, no_reuse = sums(with_reuse), sums(without_reuse)
    ratio = {k: round(no_reuse[k] / reuse[k], 2) for k in reuse}
    record = {
        "candidate": {
            "name": CANDIDATE,
            "hidden": list(hidden),
            "epochs": args.epochs,
            "note": "demo mlp widened so that training dominates",
        },
        "view": view,
        "variants": variants,
        "trainings_with_reuse": trainings,
        "with_reuse": {"total": reuse, "executions": with_reuse},
        "without_reuse": {"total": no_reuse, "executions": without_reuse},
        "ratio_without_over_with": ratio,
        "target_cpu_ratio": TARGET_RATIO,
        "meets_target": ratio["cpu_s"] >= TARGET_RATIO,
        "demo_ring": demo_ring,
        "problems": problems,
        "bench_wall_s": round(time.perf_counter() - started, 1),
    }
    path = _ring.write_results(NAME, record)

    train_s0 = with_reuse[0]
    replay_cpu = [r["cpu_s"] for r in with_reuse[1:]]
    _ring.print_table(
        f"weights reuse: {CANDIDATE} (demo mlp, hidden {hidden}, {args.epochs} epochs), "
        f"view {view}, {len(variants)} executions ({', '.join(variants)})",
        [
            ("trainings with reuse (rest replay)", f"{trainings}", "== 1"),
            ("training execution, program CPU (s)", f"{train_s0['cpu_s']:.2f}", ""),
            (
                "replay execution, program CPU mean (s)",
                f"{sum(replay_cpu) / len(replay_cpu):.2f}",
                "",
            ),
            ("program CPU, with reuse (s)", f"{reuse['cpu_s']:.1f}", ""),
            ("program CPU, without reuse (s)", f"{no_reuse['cpu_s']:.1f}", ""),
            ("    ratio without/with", f"{ratio['cpu_s']:.2f}", f">= {TARGET_RATIO}"),
            ("program wall, ratio without/with", f"{ratio['wall_s']:.2f}", ""),
            (
                "execute command CPU, ratio without/with",
                f"{ratio['command_cpu_s']:.2f}",
                "(incl. ringflow)",
            ),
            (
                "execute command wall, ratio without/with",
                f"{ratio['command_wall_s']:.2f}",
                "(incl. ringflow)",
            ),
        ],
    )
    if demo_ring:
        print()
        _ring.print_table(
            f"whole demo ring through Snakemake ({demo_ring['executions']} executions, "
            f"{demo_ring['wall_s']:.0f} s)",
            [
                ("trainings (weights_mode train)", f"{demo_ring['trainings']}", ""),
                ("distinct keys trained", f"{demo_ring['distinct_keys_trained']}", "== trainings"),
                ("replays", f"{demo_ring['replays']}", ""),
                ("keys registered in the store", f"{demo_ring['keys_registered']}", ""),
            ],
        )
    print(f"results: {path}")
    for problem in problems:
        print(f"PROBLEM: {problem}")
    if problems:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
