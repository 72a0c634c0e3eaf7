"""What the ring benchmarks share: a ring's configuration, timed commands, a small table.

Rings are run the way the workflow runs them: `python -m ringflow <cmd>` for single steps,
and Snakemake with the repository's Snakefile and `profiles/local` for whole stages, each
on a temporary folder so nothing lands in the repository's own `runs/` or `store/`.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from ringflow.core.jsonio import atomic_write_text

REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "bench" / "results"
PYTHON = sys.executable
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")

# Short health sampling and one thread per execution, as the end-to-end tests use: the
# benchmarks measure the machinery, not the defaults meant for hour-long trainings.
FAST = yaml.safe_load((REPO / "config" / "quick.yaml").read_text())


def merged(base: dict, overrides: dict) -> dict:
    """`base` with `overrides` applied; nested dicts merge one level deep, like --config."""
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = copy.deepcopy(value)
    return out


def overrides(**extra) -> dict:
    """FAST plus `extra`: what a bench writes to a --configfile."""
    return merged(FAST, extra)


def full_config(**extra) -> dict:
    """The whole configuration (repository defaults, FAST, then `extra`), for lock_ring."""
    defaults = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    return merged(defaults, overrides(**extra))


def write_configfile(path: Path, config: dict) -> Path:
    path.write_text(yaml.safe_dump(config))
    return path


@dataclass
class Timed:
    """A finished command: exit code, wall seconds, CPU seconds of its whole process tree,
    and the CPU seconds the whole machine was busy meanwhile (None where /proc/stat is not
    readable)."""

    returncode: int
    wall_s: float
    cpu_s: float
    stdout: str
    stderr: str
    machine_cpu_s: float | None = None


def run_timed(argv: list[str], cwd: Path, timeout: float = 1800) -> Timed:
    """Run a command; CPU is the rusage of the waited-for tree, so run one at a time."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy = machine_busy_s()
    start = time.perf_counter()
    proc = subprocess.run(
        argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=dict(os.environ)
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy_after = machine_busy_s()
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    machine = None if busy is None or busy_after is None else busy_after - busy
    return Timed(proc.returncode, wall, cpu, proc.stdout, proc.stderr, machine)


def machine_busy_s() -> float | None:
    """Seconds all CPUs have been busy since boot (/proc/stat: user, nice, system, irq and
    softirq; not idle, iowait, or the hypervisor's steal).
    The rusage of a waited-for tree misses what the kernel does for it outside its
    processes (its cgroups' and namespaces' teardown, in kernel threads); on a machine
    that runs nothing else, the difference across a command is what it cost."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(v) for v in stat.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, _steal = fields
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def check(timed: Timed, what: str) -> Timed:
    if timed.returncode != 0:
        raise SystemExit(
            f"{what} failed (exit {timed.returncode}):\n"
            f"{timed.stdout[-3000:]}\n{timed.stderr[-6000:]}"
        )
    return timed


def ringflow(cwd: Path, *args: str) -> Timed:
    """One step, as a rule calls it (`ringflow step NAME ...`)."""
    argv = [PYTHON, "-m", "ringflow", "step", *args]
    return check(run_timed(argv, cwd), f"ringflow step {args[0]}")


def snakemake(
    workdir: Path,
    configfile: Path,
    *extra: str,
    snakefile: Path | None = None,
    profile: bool = True,
    cores: int = 2,
) -> Timed:
    """Snakemake on `workdir` with the repository's Snakefile (or `snakefile`)."""
    argv = [
        SNAKEMAKE,
        "-s",
        str(snakefile or REPO / "Snakefile"),
        "--directory",
        str(workdir),
        "--cores",
        str(cores),
    ]
    if profile:
        argv += ["--profile", str(REPO / "profiles" / "local")]
    # Targets before --configfile: it takes several values and would swallow them.
    argv += extra
    if configfile is not None:
        argv += ["--configfile", str(configfile)]
    return check(run_timed(argv, workdir), "snakemake")


def results(ring: Path) -> dict[tuple[str, str, str], dict]:
    """Every result.json of a ring, by (node, view, variant)."""
    out = {}
    for path in ring.glob("nodes/*/exec/*/*/result.json"):
        out[(path.parts[-5], path.parts[-3], path.parts[-2])] = json.loads(path.read_text())
    return out


def print_table(title: str, rows: list[tuple[str, str, str]]) -> None:
    print(title)
    print(f"{'measure':<52}{'value':>12}  target")
    for name, value, target in rows:
        print(f"{name:<52}{value:>12}  {target}")


def remove_tree(path: Path) -> None:
    """Remove a bench folder; store objects and RING.json are read-only, so lift that first."""

    def make_writable(function, failed, _exc_info) -> None:
        os.chmod(os.path.dirname(failed), 0o700)
        if os.path.lexists(failed) and not os.path.islink(failed):
            os.chmod(failed, 0o700)
        function(failed)

    # onerror, not onexc: the project supports Python 3.11.
    shutil.rmtree(path, onerror=make_writable)


@contextlib.contextmanager
def scratch_folder(prefix: str, keep: bool, parent: str | None = None):
    """A temporary folder for a bench's rings, removed afterwards unless `keep` (--keep)."""
    work = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        yield work
    finally:
        if keep:
            print(f"kept {work}")
        else:
            remove_tree(work)


def write_results(name: str, record: dict) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    atomic_write_text(path, json.dumps(record, indent=2) + "\n")
    return path
