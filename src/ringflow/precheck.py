"""`ringflow check TASK [CANDIDATE...]`: what a ring would find wrong, found before one runs.

It runs the ring's own code on a throwaway ring in a temporary folder (removed afterwards):
the task is read and its views listed; each candidate passes the import checks (contract,
declared files, the program compiles); the scorer and validator are fed a prediction made
from a view's inputs (its files copied as output), which they must answer with a
well-formed record rather than a crash; and one candidate runs once on the first search
view, in the sandbox, under the supervisor, and is scored.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import yaml

from .candidate import load_solution
from .errors import InputError, RingflowError
from .jsonio import atomic_write_json
from .reporting.digest import first_line, last_line
from .scorer_modes import check_resampling, report_power

REPO_CONFIG = Path(__file__).resolve().parents[2] / "config" / "config.yaml"
SHAPE_NODE = "n999-shape-check"


class Report:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.failed = 0

    def head(self, text: str) -> None:
        self.lines.append(text)

    def ok(self, text: str) -> None:
        self.lines.append(f"  ok    {text}")

    def warn(self, text: str) -> None:
        self.lines.append(f"  warn  {text}")

    def fail(self, text: str) -> None:
        self.failed += 1
        self.lines.append(f"  FAIL  {text}")

    def text(self) -> str:
        verdict = "no problem found" if not self.failed else f"{self.failed} problem(s)"
        return "\n".join([*self.lines, "", f"check: {verdict}"]) + "\n"


def default_config() -> dict:
    if not REPO_CONFIG.is_file():
        raise InputError(f"check: the default configuration {REPO_CONFIG} is missing")
    return yaml.safe_load(REPO_CONFIG.read_text())


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


def _check_candidates(report: Report, folders: list[Path], max_bytes: int) -> list[Path]:
    report.head("candidates (the import checks a ring makes):")
    good = []
    if not folders:
        report.warn("no candidate given: only the task is checked")
    for folder in folders:
        try:
            solution = load_solution(folder, max_bytes)
        except RingflowError as exc:
            report.fail(f"{folder.name}: {exc}")
            continue
        weights = ", ".join(solution.per_view_paths) or "none"
        report.ok(f"{folder.name}: {' '.join(solution.command)}; per-view weights: {weights}")
        good.append(folder)
    return good


def _score_shaped_prediction(report: Report, ring: dict) -> None:
    from .ring.layout import RingLayout
    from .scoring import score_execution

    view = ring["search_views"][0]
    layout = RingLayout(Path(ring["ring_dir"]))
    report.head(f"scorer and validator on a prediction made from {view}'s inputs:")
    exec_dir = layout.exec_dir(SHAPE_NODE, view, "s0")
    shutil.copytree(Path(ring["views"][view]["dir"]) / "inputs", exec_dir / "output")
    atomic_write_json(exec_dir / "result.json", {"status": "ok", "budget_cut": False})
    try:
        score = score_execution(ring["ring_dir"], SHAPE_NODE, view, "s0")
    except RingflowError as exc:
        report.fail(f"scoring failed: {exc}")
        return
    if score.get("scored"):
        validity = "valid" if score["valid"] else "invalid"
        report.ok(
            f"answered with a well-formed record: {validity}, "
            + ("no score" if score["score"] is None else f"score {score['score']:g}")
            + (f", reason: {first_line(score.get('reason'))}" if score.get("reason") else "")
        )
        if score["valid"]:
            report.warn("the inputs' own files were scored as a valid prediction")
    else:
        report.fail(
            f"{first_line(score.get('reason')) or 'no score'} (a scorer must write "
            '{"score": 0.0, "valid": false, "reason": "..."} for output it cannot use, and '
            "exit 0)"
        )


def _run_one(report: Report, ring: dict, node: str) -> None:
    from .execute import run_execution
    from .ring.layout import RingLayout
    from .scoring import score_execution

    view = ring["search_views"][0]
    report.head(f"one run of {node} on {view} (seed 0), scored:")
    result = run_execution(ring["ring_dir"], node, view, "s0")
    exec_dir = RingLayout(Path(ring["ring_dir"])).exec_dir(node, view, "s0")
    if result["status"] != "ok":
        tail = last_line(exec_dir / "stderr.log")
        report.fail(
            f"{result['status']}: {first_line(result.get('reason'))}"
            + (f"; stderr: {tail}" if tail else "")
        )
        return
    report.ok(f"exited 0 in {result['wall_s']:.1f}s (weights: {result['weights_mode']})")
    score = score_execution(ring["ring_dir"], node, view, "s0")
    if score.get("scored") and score.get("valid"):
        report.ok(f"score {score['score']:.6g} (valid)")
    elif score.get("scored"):
        report.fail(f"invalid output: {first_line(score.get('reason'))}")
    else:
        report.fail(f"not scored: {first_line(score.get('reason'))}")


def check(
    task: str | Path, candidates: list[str | Path], run: bool = True, baseline=None
) -> Report:
    """Check a task and candidates as a ring would; nothing outside a temporary folder is
    written."""
    from .nodes import import_static
    from .ring.lock import lock_ring
    from .task import load_task

    report = Report()
    config = default_config()
    task_dir = Path(task).resolve()
    try:
        spec = load_task(task_dir)
    except InputError as exc:
        report.head(f"task {task_dir}:")
        report.fail(str(exc))
        return report
    report.head(f"task {task_dir}:")
    report.ok(
        f"{spec.name} ({spec.direction}); views {', '.join(spec.views)}; scorer "
        f"{spec.scorer!r}; validator {spec.validator!r}"
    )
    folders = solution_folders([Path(c).resolve() for c in candidates])
    max_bytes = int(config["max_weights_gb"] * 1024**3)
    good = _check_candidates(report, folders, max_bytes)
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
            baseline=str(Path(baseline).resolve()) if baseline else None,
            continue_from=None,
        )
        try:
            ring = lock_ring(config, work)
        except RingflowError as exc:
            report.head("views:")
            report.fail(str(exc))
            return report
        report.head("views:")
        report.ok(
            f"search {', '.join(ring['search_views'])}; final {ring['final_view']}; "
            f"{sum(v['files'] for v in ring['views'].values())} files hashed"
        )
        index = import_static(ring)
        _score_shaped_prediction(report, ring)
        ready = [n["id"] for n in index["nodes"] if n["status"] == "ready"
                 and n["id"] != index.get("baseline")]  # fmt: skip
        if run and ready:
            _run_one(report, ring, ready[0])
            check_resampling(report, ring, ready[0], ring["search_views"][0])
        if run:
            report_power(report, ring, index)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return report
