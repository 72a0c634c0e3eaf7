"""A task folder (docs/contracts.md#task): task.yaml, views/<view>/inputs/ and
views/<view>/labels/."""

from __future__ import annotations

import shlex
import sys
from dataclasses import field
from pathlib import Path

from .core.errors import InputError
from .core.frozen import Frozen, frozen_record

DIRECTIONS = ("maximize", "minimize")


@frozen_record
class Task(Frozen):
    dir: Path
    name: str
    direction: str
    scorer: str
    validator: str | None
    views: tuple[str, ...]
    reorder_rows: tuple[str, ...]
    # What each view is for, as task.yaml declares it ({} when it lists views only).
    roles: dict = field(default_factory=dict)
    # The scorer returns many bootstrap scores in one call (`--bootstrap N`).
    scorer_bootstrap: bool = False
    # What the scorer gives per output (docs/guard.md#scorer-modes): "resample" (the seed
    # draws the rows), "rows" (one value per row; ringflow draws the resamples) or "fixed"
    # (one number, nothing to resample: the guard covers program noise only).
    scorer_mode: str = "resample"

    def view_dir(self, view: str) -> Path:
        return self.dir / "views" / view

    def to_dict(self) -> dict:
        return {
            "dir": str(self.dir),
            "name": self.name,
            "direction": self.direction,
            "scorer": self.scorer,
            "validator": self.validator,
            "views": list(self.views),
            "reorder_rows": list(self.reorder_rows),
            "roles": self.roles,
            "scorer_bootstrap": self.scorer_bootstrap,
            "scorer_mode": self.scorer_mode,
        }


def load_task(task_dir: str | Path) -> Task:
    """Read and check a task folder; every fault names the file and what is wrong."""
    from .core.yamlio import YAMLError, load_yaml  # only the lock reads task.yaml

    task_dir = Path(task_dir).resolve()
    spec_path = task_dir / "task.yaml"
    if not spec_path.is_file():
        raise InputError(f"task {task_dir}: task.yaml not found")
    try:
        spec = load_yaml(spec_path.read_text()) or {}
    except YAMLError as exc:
        raise InputError(f"{spec_path}: malformed YAML: {exc}") from None
    if not isinstance(spec, dict):
        raise InputError(f"{spec_path}: expected a mapping at the top level")
    missing = [key for key in ("name", "direction", "scorer")
               if not isinstance(spec.get(key), str) or not spec[key].strip()]  # fmt: skip
    if missing:
        raise TaskProblems([f"{spec_path}: '{key}' is required and must be a non-empty string"
                            for key in missing])  # fmt: skip
    if spec["direction"] not in DIRECTIONS:
        raise InputError(
            f"{spec_path}: direction must be one of {', '.join(DIRECTIONS)}, "
            f"not {spec['direction']!r}"
        )
    validator = spec.get("validator")
    if validator is not None and (not isinstance(validator, str) or not validator.strip()):
        raise InputError(f"{spec_path}: 'validator' must be a command string when given")
    views_root = task_dir / "views"
    if not views_root.is_dir():
        raise InputError(f"task {task_dir}: views/ folder not found")
    found = sorted(p.name for p in views_root.iterdir() if p.is_dir())
    roles = view_roles(spec.get("views"), spec_path)
    if roles:
        order = [*roles["search"], *roles["guard"], *([roles["final"]] if roles["final"] else [])]
    else:
        order = spec.get("views") or found
    if not isinstance(order, list) or not all(isinstance(v, str) for v in order):
        raise InputError(f"{spec_path}: 'views' must be a list of view names")
    if len(set(order)) != len(order):
        raise InputError(f"{spec_path}: a view may have only one role, got {order}")
    absent = [f"task {task_dir}: views/{view}/{part}/ not found"
              for view in order for part in ("inputs", "labels")
              if not (views_root / view / part).is_dir()]  # fmt: skip
    if absent:
        raise TaskProblems(absent)  # every one at once: the user fixes them together
    reorder = spec.get("reorder_rows") or []
    if not isinstance(reorder, list) or not all(isinstance(v, str) for v in reorder):
        raise InputError(f"{spec_path}: 'reorder_rows' must be a list of input file names")
    return Task(
        dir=task_dir,
        name=spec["name"],
        direction=spec["direction"],
        scorer=spec["scorer"],
        validator=validator,
        views=tuple(order),
        reorder_rows=tuple(reorder),
        roles=roles,
        scorer_bootstrap=_flag(spec, "scorer_bootstrap", spec_path),
        scorer_mode=scorer_mode(spec, spec_path),
    )


class TaskProblems(InputError):
    """Several problems of one task folder, each said on a line of its own."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


SCORER_MODES = ("resample", "rows", "fixed")


def scorer_mode(spec: dict, spec_path: Path) -> str:
    """The scorer mode task.yaml declares: `scorer_rows: true` is "rows",
    `scorer_resamples: false` is "fixed", neither is "resample" (the seed draws the rows)."""
    rows = _flag(spec, "scorer_rows", spec_path)
    resamples = spec.get("scorer_resamples", True)
    if not isinstance(resamples, bool):
        raise InputError(
            f"{spec_path}: 'scorer_resamples' must be true or false, got {resamples!r}"
        )
    if rows and not resamples:
        raise InputError(
            f"{spec_path}: 'scorer_rows: true' and 'scorer_resamples: false' contradict each "
            "other: a scorer that returns one value per row can be resampled by ringflow"
        )
    if rows and _flag(spec, "scorer_bootstrap", spec_path):
        raise InputError(
            f"{spec_path}: 'scorer_rows: true' and 'scorer_bootstrap: true' exclude each other: "
            "with rows, ringflow draws the bootstrap resamples itself"
        )
    return "rows" if rows else "resample" if resamples else "fixed"


def _flag(spec: dict, key: str, spec_path: Path) -> bool:
    value = spec.get(key, False)
    if not isinstance(value, bool):
        raise InputError(f"{spec_path}: '{key}' must be true or false, got {value!r}")
    return value


def view_roles(declared, spec_path: Path) -> dict:
    """`views: {search: [...], guard: [...], final: <view>}` checked; {} for a plain list."""
    if declared is None or isinstance(declared, list):
        return {}
    if not isinstance(declared, dict):
        raise InputError(
            f"{spec_path}: 'views' must be a list of view names or a mapping "
            "{search: [...], guard: [...], final: <view>}"
        )
    unknown = set(declared) - {"search", "guard", "final"}
    if unknown:
        raise InputError(
            f"{spec_path}: 'views' has unknown role(s) {sorted(unknown)}; "
            "the roles are search, guard and final"
        )
    roles = {}
    for role in ("search", "guard"):
        value = declared.get(role) or []
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise InputError(f"{spec_path}: 'views.{role}' must be a list of view names")
        roles[role] = value
    if not roles["search"]:
        raise InputError(f"{spec_path}: 'views.search' must name at least one view")
    final = declared.get("final")
    if final is not None and (not isinstance(final, str) or not final):
        raise InputError(f"{spec_path}: 'views.final' must be a view name")
    roles["final"] = final
    return roles


def command_argv(command: str, python: str | None = None) -> list[str]:
    """Split a task or candidate command; a leading `python` means `python` (by default
    ringflow's own interpreter, which runs the task's scorer and validator; candidates
    pass their program.python).

    PATH inside a Snakemake job need not point at either environment.
    """
    argv = shlex.split(command)
    if not argv:
        raise InputError("empty command")
    if argv[0] in ("python", "python3"):
        argv[0] = python or sys.executable
    return argv


def split_views(
    task: Task, search: list[str], final: str | None, guard: list[str] | None = None
) -> tuple[list[str], list[str], str]:
    """(search views in order, guard views, final view): the ring's config where it says
    so, else the task's declared roles, else every view but `final` is a search view."""
    roles = task.roles
    final = final or roles.get("final") or "final"
    if final not in task.views:
        raise InputError(f"final view {final!r} is not a view of task {task.name!r}")
    declared_search = roles.get("search") or [v for v in task.views if v != final]
    guard = list(roles.get("guard", []) if guard is None else guard)
    chosen = search or [v for v in declared_search if v not in guard]
    for role, views in (("search", chosen), ("guard", guard)):
        for view in views:
            if view not in task.views:
                raise InputError(f"{role} view {view!r} is not a view of task {task.name!r}")
            if view == final:
                raise InputError(f"the final view {final!r} cannot also be a {role} view")
    both = set(chosen) & set(guard)
    if both:
        raise InputError(
            f"view(s) {sorted(both)} cannot be both search and guard views: the guard must "
            "score rows the search never saw"
        )
    if not chosen:
        raise InputError(f"task {task.name!r} has no search view besides {final!r}")
    return chosen, guard, final
