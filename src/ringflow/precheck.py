"""`ringflow check TASK [CANDIDATE...]`: what a ring would find wrong, found before one runs.

It runs the ring's own code on a throwaway ring in a temporary folder (removed afterwards):
the task is read, every file its scorer and validator commands name is there and compiles,
and its views are listed by role; each candidate passes the import checks (contract,
declared files, the program compiles); and one program (the baseline with `--baseline`,
else the first candidate) runs once on the first search view, in the sandbox, under the
supervisor, and its output is validated and scored by the task, as a ring would.
"""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
from pathlib import Path
from typing import TextIO

from .candidate import load_solution, task_file_ids
from .check_guard import check_resampling, report_power
from .core import statuses
from .core.errors import InputError, RingflowError
from .core.safetext import printable
from .core.state import Ring
from .core.yamlio import YAMLError, load_yaml
from .reporting.digest import first_line, last_line

REPO_CONFIG = Path(__file__).resolve().parents[2] / "config" / "config.yaml"


class Report:
    """The check's lines; with `echo`, each is also written there as it comes, so that a
    run that takes its time shows what it is waiting for."""

    def __init__(self, echo: TextIO | None = None) -> None:
        self.lines: list[str] = []
        self.failed = 0
        self.echo = echo

    def _add(self, line: str) -> None:
        # Folder names, commands and messages are the task's and the candidates' own.
        line = printable(line)
        self.lines.append(line)
        if self.echo is not None:
            print(line, file=self.echo, flush=True)

    def head(self, text: str) -> None:
        self._add(text)

    def ok(self, text: str) -> None:
        self._add(f"  ok    {text}")

    def warn(self, text: str) -> None:
        self._add(f"  warn  {text}")

    def fail(self, text: str) -> None:
        self.failed += 1
        self._add(f"  FAIL  {text}")

    def verdict(self) -> str:
        return "check: " + ("no problem found" if not self.failed else f"{self.failed} problem(s)")

    def text(self) -> str:
        return "\n".join([*self.lines, "", self.verdict()]) + "\n"


def default_config(configfile: str | Path | None = None) -> dict:
    """The defaults, with the ring's configuration file (`--configfile`) laid over them."""
    if not REPO_CONFIG.is_file():
        raise InputError(f"check: the default configuration {REPO_CONFIG} is missing")
    config = load_yaml(REPO_CONFIG.read_text())
    if configfile is None:
        return config
    try:
        given = load_yaml(Path(configfile).read_text()) or {}
    except (OSError, YAMLError) as exc:
        raise InputError(f"check: --configfile {configfile}: {exc}") from None
    if not isinstance(given, dict):
        raise InputError(f"check: --configfile {configfile} is not a mapping of config keys")
    return _overlay(config, given)


def solution_folders(paths: list[Path]) -> list[Path]:
    """A path is a candidate (it has run.py or EXECUTION.json) or a folder of candidates."""
    found = []
    for path in paths:
        if not path.is_dir():
            raise InputError(f"check: candidate {path} is not a folder")
        if (path / "run.py").exists() or (path / "EXECUTION.json").exists():
            found.append(path)
        else:
            found += sorted(
                p for p in path.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))
            )
    return found


def _check_candidates(
    report: Report, folders: list[Path], max_bytes: int, task_files: dict
) -> list[Path]:
    report.head("candidates (the import checks a ring makes):")
    good = []
    if not folders:
        report.warn("no candidate given: only the task is checked")
    for folder in folders:
        try:
            solution = load_solution(folder, max_bytes, task_files=task_files)
        except RingflowError as exc:
            report.fail(f"{folder.name}: {exc}")
            continue
        weights = ", ".join(solution.per_view_paths) or "none"
        report.ok(f"{folder.name}: {' '.join(solution.command)}; per-view weights: {weights}")
        good.append(folder)
    return good


def command_files(command: str, task_dir: Path) -> list[tuple[str, Path]]:
    """(word, path) for each file a task command names: the script after `python` (or the
    module after `python -m`), and any other word that names a file of the task folder
    or looks like one (a `.py` or `.sh` word)."""
    words = shlex.split(command)
    named: list[tuple[str, Path]] = []
    rest = words
    if words and (words[0] in ("python", "python3") or "python" in Path(words[0]).name):
        rest = words[1:]
        while rest and rest[0].startswith("-") and rest[0] != "-m":
            rest = rest[1:]  # interpreter options (-u, -B)
        if rest[:1] == ["-m"] and len(rest) > 1:
            module = task_dir / Path(*rest[1].split("."))
            named.append((rest[1], module.with_suffix(".py") if not module.is_dir() else
                          module / "__main__.py"))  # fmt: skip
            rest = rest[2:]
        elif rest:
            named.append((rest[0], task_dir / rest[0]))
            rest = rest[1:]
    elif words and not shutil.which(words[0]):
        named.append((words[0], task_dir / words[0]))
        rest = words[1:]
    for word in rest:
        if word.startswith("-"):
            continue
        path = task_dir / word
        if path.suffix in (".py", ".sh") or path.is_file():
            named.append((word, path))
    return named


def _check_commands(report: Report, spec) -> None:
    """Every file the scorer and validator commands name exists, and Python compiles: a
    missing scorer would otherwise stop the ring after its first runs."""
    for role, command in (("scorer", spec.scorer), ("validator", spec.validator)):
        if command is None:
            continue
        problems = []
        for word, path in command_files(command, spec.dir):
            if not path.is_file():
                problems.append(f"{word!r} is not a file of {spec.dir}")
                continue
            if path.suffix == ".py":
                try:
                    compile(path.read_bytes(), str(path), "exec", dont_inherit=True)
                except SyntaxError as exc:
                    problems.append(f"{path}: does not compile: {exc.msg} (line {exc.lineno})")
                except ValueError as exc:
                    problems.append(f"{path}: does not compile: {exc}")
        if problems:
            for problem in problems:
                report.fail(f"{role} {command!r}: {problem}")
        else:
            report.ok(f"{role} {command!r}: its files are there and compile")
    if spec.validator is None:
        report.ok("no validator (the scorer alone judges an output)")


def _run_one(report: Report, ring: Ring, node: str, baseline: bool) -> None:
    """Run `node` once on the first search view and score its output with the task's
    validator and scorer: a real output, so a working validator and scorer pass."""
    from .core.layout import RingLayout
    from .execute import run_execution
    from .scoring import score_execution

    view = ring.search_views[0]
    limit = ring.views[view].limits["time_limit_min"]
    report.head(
        f"one run of {node} on {view} (seed 0; time limit {limit:g} min, "
        "limits.time_limit_min), its output validated and scored by the task:"
    )
    result = run_execution(ring.ring_dir, node, view, "s0")
    exec_dir = RingLayout(Path(ring.ring_dir)).exec_dir(node, view, "s0")
    if result.status != "ok":
        tail = last_line(exec_dir / "stderr.log")
        report.fail(
            f"{result.status}: {first_line(result.reason)}" + (f"; stderr: {tail}" if tail else "")
        )
        return
    report.ok(f"exited 0 in {result.wall_s:.1f}s (weights: {result.weights_mode})")
    try:
        score = score_execution(ring.ring_dir, node, view, "s0")
    except RingflowError as exc:  # a scorer failing on the baseline stops a ring
        report.fail(f"{first_line(str(exc))} (fix the task)")
        return
    if score.get("scored") and score.get("valid"):
        report.ok(f"score {score['score']:.6g} (valid)")
    elif score.get("evaluator_failed"):
        # The baseline's output failing the scorer stops a ring at once; candidates'
        # outputs, once scorer_fail_stop programs' outputs did.
        stops = ("at once" if baseline else
                 f"once it fails on {ring.config.scorer_fail_stop} programs' outputs")  # fmt: skip
        report.fail(
            f"the task's {first_line(score.get('reason'))} (a ring stops on this {stops}: "
            "fix the task)"
        )
    elif not score.get("scored") and not str(score.get("reason", "")).startswith("invalid"):
        report.fail(f"not scored: {first_line(score.get('reason'))}")
    else:
        # Whose fault: the program's output, unless that output is right and the task's
        # scorer or validator misjudged it.
        why = first_line(score.get("reason")).removeprefix("invalid: ")
        report.fail(
            f"{node}'s output was judged invalid: {why} (fix the "
            f"program; if its output is right, the task's scorer or validator misjudged it)"
        )


def _views_line(ring: Ring) -> str:
    guard = ", ".join(ring.guard_views or []) or "none (the guard re-uses search rows)"
    return (
        f"search {', '.join(ring.search_views)}; guard {guard}; final {ring.final_view}; "
        f"{sum(v.files or 0 for v in ring.views.values())} files hashed"
    )


def _overlay(base: dict, over: dict) -> dict:
    """A configuration file laid over the defaults, nested mappings key by key."""
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _overlay(merged[key], value)
        else:
            merged[key] = value
    return merged


def _check_slurm(report: Report, profile: str | Path, configfile: str | Path | None) -> None:
    """What the lock refuses under the SLURM executor: executions no node can run."""
    from .cluster.target import profile_target, slurm_problem

    try:
        target = profile_target(Path(profile))
    except InputError as exc:
        report.head(f"profile {profile}:")
        report.fail(str(exc))
        return
    if target is None:
        return
    config = default_config(configfile)
    report.head(f"SLURM partition {target.partition or '(the default)'}:")
    try:
        problem = slurm_problem(config, target)
    except InputError as exc:
        report.fail(str(exc))
        return
    if problem:
        report.fail(problem)
        return
    report.ok("a node can run every execution the ring asks for")
    _check_node(report, config, target)


def _check_node(report: Report, config: dict, target) -> None:
    """The lock's probe job (docs/slurm.md#compute-nodes-are-probed), on the runs folder and
    the store the configuration names, taken from the current folder as the workflow's."""
    from .cluster.node_probe import probe_node
    from .core.settings import Program
    from .weights.keys import program_python

    def existing(path: str) -> Path:
        # A check writes nothing lasting: a folder the first ring would make is probed
        # through the nearest one that exists.
        folder = (Path.cwd() / Path(path).expanduser()).resolve()
        return next(p for p in (folder, *folder.parents) if p.is_dir())

    runs, store = existing(config["runs_dir"]), existing(config["store"])
    try:
        facts = probe_node(
            "check",
            {"runs folder": runs, "store": store},
            program_python(Program.from_mapping(config["program"], "program")),
            config["sandbox"],
            target,
            int(config.get("gpus_per_execution") or 0) if target.gpus else 0,
        )
    except (InputError, OSError) as exc:
        report.fail(str(exc))
        return
    gpu = facts.get("gpu")
    report.ok(
        f"compute node {facts.get('host')}: sandbox {facts['sandbox'].get('mode')}, the "
        f"candidates' Python {facts['program_python'].get('version')}, the runs folder and "
        "the store shared with this machine"
        + (f", GPUs {', '.join(gpu['gpus'])} (driver {gpu['driver']})" if gpu else "")
    )


def check(
    task: str | Path,
    candidates: list[str | Path],
    run: bool = True,
    baseline: str | Path | None = None,
    profile: str | Path | None = None,
    configfile: str | Path | None = None,
    echo: TextIO | None = None,
) -> Report:
    """Check a task and candidates as a ring would; nothing outside a temporary folder is
    written. The baseline (when one is given) and the first candidate each run once in
    the sandbox; the first of these runs also probes the scorer's mode. With a SLURM
    `profile`, the executions' requests are checked against the profile's partition
    first. The runs use the defaults with `configfile` laid over them, as a ring would
    (its limits: a program that hangs is stopped at its time limit)."""
    from .core.layout import RingLayout
    from .core.node_state import read_node
    from .nodes import import_static
    from .ring.lock import lock_ring
    from .task import load_task

    report = Report(echo)
    try:
        config = default_config(configfile)
    except InputError as exc:
        report.head("configuration:")
        report.fail(str(exc))
        return report
    task_dir = Path(task).resolve()
    try:
        spec = load_task(task_dir)
    except InputError as exc:
        report.head(f"task {task_dir}:")
        for problem in getattr(exc, "problems", None) or [str(exc)]:
            report.fail(problem)
        return report
    report.head(f"task {task_dir}:")
    report.ok(f"{spec.name} ({spec.direction})")
    if profile is not None:
        _check_slurm(report, profile, configfile)
    _check_commands(report, spec)
    baseline_dir = None if baseline is None else Path(baseline).resolve()
    if baseline_dir is not None and not baseline_dir.is_dir():
        report.fail(f"baseline {baseline_dir} is not a folder")
        return report
    folders = solution_folders([Path(c).resolve() for c in candidates])
    max_bytes = int(config["max_weights_gb"] * 1024**3)
    good = _check_candidates(report, folders, max_bytes, task_file_ids(task_dir))
    work = Path(tempfile.mkdtemp(prefix="ringflow-check-"))
    try:
        (work / "candidates").mkdir()
        for folder in good:
            os.symlink(folder, work / "candidates" / folder.name)
        config.update(
            ring_id="check",
            runs_dir=str(work / "runs"),
            store=str(work / "store"),
            resources_dir=str(work / "resources"),
            task=str(task_dir),
            candidates=str(work / "candidates"),
            baseline=None if baseline_dir is None else str(baseline_dir),
            continue_from=None,
        )
        config.pop("rings", None)  # a chain file's rings: the check is one ring of its own
        try:
            ring = lock_ring(config, work)
        except RingflowError as exc:
            report.head("views:")
            report.fail(str(exc))
            return report
        report.head("views:")
        report.ok(_views_line(ring))
        index = import_static(ring)
        ready = [n for n in index["nodes"] if n["status"] == statuses.READY]
        base = next((n for n in index["nodes"] if n["role"] == "baseline"), None)
        if base is not None and base["status"] != statuses.READY:
            error = read_node(RingLayout(work / "runs" / "check").node_json(base["id"])).error
            report.fail(f"baseline {baseline_dir.name}: {error}")
        elif base is not None:
            report.ok(f"baseline {baseline_dir.name}: passes the import checks")
        # The baseline's run probes the scorer, as the guard will use it; the first
        # candidate's says whether the user's own program runs in the sandbox.
        probes = [n["id"] for n in ready if n["role"] == "baseline"][:1]
        probes += [n["id"] for n in ready if n["role"] != "baseline"][:1]
        if not run:
            report.warn("--no-run: the scorer and validator were not tried on an output")
        elif not probes:
            report.warn("no candidate to run: the scorer and validator were not tried")
        else:
            for node in probes:
                _run_one(report, ring, node, baseline=base is not None and node == base["id"])
            check_resampling(report, ring, probes[0], ring.search_views[0])
        if run:
            report_power(report, ring, index)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return report
