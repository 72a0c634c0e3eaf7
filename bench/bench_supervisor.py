"""Supervisor costs: one sample of a 100-process tree, its own CPU share while it
supervises, and how long a stop takes beyond the grace.

    python bench/bench_supervisor.py [--samples 50] [--tree 100] [--run-1s 30]
                                     [--run-60s 45] [--term-runs 20] [--no-subreaper-runs]

Baseline for the sampling cost: the same processes read through psutil `oneshot()`
(cpu_times, io_counters, status, num_threads, memory_info) in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from ringflow.supervisor import HealthSettings, ResourceLimits, supervise  # noqa: E402
from ringflow.supervisor.cgroup import DISABLE_ENV  # noqa: E402
from ringflow.supervisor.proctree import TOKEN_ENV, ProcessTree  # noqa: E402
from ringflow.supervisor.sampling import TreeSampler  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "bench_supervisor.json"
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}

ESCAPING = textwrap.dedent(
    """
    import os, signal, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            while True:
                time.sleep(0.2)
        os._exit(0)
    while True:
        time.sleep(0.2)
    """
)


def tree_command(size: int) -> list[str]:
    """A shell and size-1 sleeping children: `size` processes in all."""
    script = f"for i in $(seq {size - 1}); do sleep 600 & done; wait"
    return ["sh", "-c", script]


def ms_stats(values: list[float]) -> dict:
    return {
        "median_ms": round(statistics.median(values) * 1000, 3),
        "max_ms": round(max(values) * 1000, 3),
    }


def bench_sampling(size: int, count: int) -> dict:
    token = uuid.uuid4().hex
    root = subprocess.Popen(
        tree_command(size), env={**ENV, TOKEN_ENV: token}, start_new_session=True
    )
    try:
        tree = ProcessTree(token)
        tree.set_root(root.pid)
        end = time.time() + 10
        while len(tree.discover()) < size and time.time() < end:
            time.sleep(0.05)
        sampler = TreeSampler(tree, None, None)
        ours, baseline = [], []
        for _ in range(count):
            t0 = time.perf_counter()
            sample = sampler.sample()
            ours.append(time.perf_counter() - t0)
            pids = sample.pids
            t0 = time.perf_counter()
            for pid in pids:
                try:
                    p = psutil.Process(pid)
                    with p.oneshot():
                        p.cpu_times(), p.io_counters(), p.status()
                        p.num_threads(), p.memory_info()
                except psutil.Error:
                    pass
            baseline.append(time.perf_counter() - t0)
        assert sample.n_procs == size, f"tree has {sample.n_procs} processes, not {size}"
        result = {
            "processes": sample.n_procs,
            "samples": count,
            "ours": ms_stats(ours),
            "psutil_oneshot_baseline": ms_stats(baseline),
        }
        result["ratio_median"] = round(statistics.median(ours) / statistics.median(baseline), 3)
        return result
    finally:
        os.killpg(root.pid, 9)
        root.wait()


def thread_cpu_ns(tid: int) -> int:
    """CPU time of one thread of this process in ns (schedstat: finer than clock ticks)."""
    return int(Path(f"/proc/self/task/{tid}/schedstat").read_text().split()[0])


def bench_own_cpu(collect_s: float, seconds: float, size: int) -> dict:
    """Whole run (start and stop included) and steady state: the supervising thread's CPU
    from 3 s after start to 1 s before the cutoff, read by a helper thread."""
    work = Path(tempfile.mkdtemp(prefix="bench-supervisor-"))
    main_tid = threading.get_native_id()
    steady: dict = {}

    def watch() -> None:
        time.sleep(3)
        a, ta = thread_cpu_ns(main_tid), time.monotonic()
        time.sleep(max(seconds - 4, 0.5))
        b, tb = thread_cpu_ns(main_tid), time.monotonic()
        steady.update(cpu_s=(b - a) / 1e9, wall_s=tb - ta)

    watcher = threading.Thread(target=watch)
    watcher.start()
    settings = HealthSettings(
        collect_s=collect_s, interval_s=max(collect_s, 300), hang_min=600, term_grace_s=1
    )
    cutoff = time.time() + seconds
    before = os.times()
    t0 = time.monotonic()
    outcome = supervise(
        tree_command(size),
        cwd=work,
        env=ENV,
        stdout_path=work / "out",
        stderr_path=work / "err",
        health_dir=work / "health",
        settings=settings,
        limits=ResourceLimits(),
        deadline=lambda: cutoff,
    )
    wall = time.monotonic() - t0
    after = os.times()
    watcher.join()
    own = (after.user - before.user) + (after.system - before.system)
    return {
        "collect_s": collect_s,
        "wall_s": round(wall, 2),
        "own_cpu_s": round(own, 3),
        "own_cpu_fraction_pct": round(100 * own / wall, 4),
        "steady_cpu_s": round(steady["cpu_s"], 4),
        "steady_wall_s": round(steady["wall_s"], 2),
        "steady_cpu_fraction_pct": round(100 * steady["cpu_s"] / steady["wall_s"], 4),
        "tree_processes": size,
        "status": outcome.status,
    }


def bench_termination(runs: int, grace: float, use_cgroup: bool) -> dict:
    if use_cgroup:
        os.environ.pop(DISABLE_ENV, None)
    else:
        os.environ[DISABLE_ENV] = "1"
    work = Path(tempfile.mkdtemp(prefix="bench-supervisor-term-"))
    (work / "prog.py").write_text(ESCAPING)
    settings = HealthSettings(collect_s=0.2, interval_s=5, hang_min=10, term_grace_s=grace)
    over, kill_paths, left = [], set(), 0
    try:
        for _ in range(runs):
            cutoff = time.time() + 0.5
            outcome = supervise(
                [sys.executable, "prog.py"],
                cwd=work,
                env=ENV,
                stdout_path=work / "out",
                stderr_path=work / "err",
                health_dir=work / "health",
                settings=settings,
                limits=ResourceLimits(),
                deadline=lambda c=cutoff: c,
            )
            over.append(time.time() - cutoff - grace)
            kill_paths.add(
                outcome.limits["cgroup"]["kill"]
                if outcome.limits["cgroup"]["kill_used"]
                else "signals"
            )
            left += len(outcome.reap_left)
    finally:
        os.environ.pop(DISABLE_ENV, None)
    return {
        "runs": runs,
        "term_grace_s": grace,
        "kill": sorted(kill_paths),
        "reap_left_total": left,
        "beyond_grace": ms_stats(over),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--tree", type=int, default=100)
    parser.add_argument("--run-1s", type=float, default=30.0, help="seconds at collect_s 1")
    parser.add_argument("--run-60s", type=float, default=45.0, help="seconds at collect_s 60")
    parser.add_argument("--term-runs", type=int, default=20)
    parser.add_argument("--term-grace", type=float, default=0.5)
    parser.add_argument(
        "--no-subreaper-runs",
        action="store_true",
        help="skip the termination runs without a cgroup",
    )
    args = parser.parse_args()

    results: dict = {"sampling": bench_sampling(args.tree, args.samples)}
    results["own_cpu"] = [
        bench_own_cpu(1.0, args.run_1s, args.tree),
        bench_own_cpu(60.0, args.run_60s, args.tree),
    ]
    results["termination"] = [bench_termination(args.term_runs, args.term_grace, True)]
    if not args.no_subreaper_runs:
        results["termination"].append(bench_termination(args.term_runs, args.term_grace, False))

    s = results["sampling"]
    print(f"{'measure':<44}{'value':>16}{'target':>12}")
    print(
        f"{'sample of ' + str(s['processes']) + ' processes, median ms':<44}"
        f"{s['ours']['median_ms']:>16}{'<= 20':>12}"
    )
    print(f"{'sample, max ms':<44}{s['ours']['max_ms']:>16}{'':>12}")
    print(
        f"{'psutil oneshot baseline, median ms':<44}"
        f"{s['psutil_oneshot_baseline']['median_ms']:>16}{'':>12}"
    )
    print(f"{'ours / baseline (median)':<44}{s['ratio_median']:>16}{'':>12}")
    for run in results["own_cpu"]:
        target = "< 5" if run["collect_s"] == 1 else "< 0.1"
        label = f"own CPU % at collect_s {run['collect_s']:g}, steady"
        print(f"{label:<44}{run['steady_cpu_fraction_pct']:>16}{target:>12}")
        label = f"  whole run incl. start+stop ({run['wall_s']:.0f} s)"
        print(f"{label:<44}{run['own_cpu_fraction_pct']:>16}{'':>12}")
    for term in results["termination"]:
        label = f"stop beyond grace, {'/'.join(term['kill'])}, median ms"
        print(f"{label:<44}{term['beyond_grace']['median_ms']:>16}{'':>12}")
        print(
            f"{'  max ms (' + str(term['runs']) + ' runs)':<44}"
            f"{term['beyond_grace']['max_ms']:>16}{'<= 2000':>12}"
        )
        print(f"{'  processes left':<44}{term['reap_left_total']:>16}{'0':>12}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"written {RESULTS}")


if __name__ == "__main__":
    main()
