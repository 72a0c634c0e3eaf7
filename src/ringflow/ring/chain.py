"""Continuing a chain (docs/operations.md#chains): a ring that continues another inherits its task,
candidates, baseline and configuration; another task or direction is refused.

A key left at its default (`config/config.yaml`) takes the parent ring's value; a key given
another value, or given on the command line (`--config key=value`, `null` and the default's
own value included), is a deliberate change, kept and listed under `chain.changed` in
RING.json.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

from ..core.errors import InputError
from ..core.jsonio import read_json
from ..core.layout import RingLayout
from ..core.settings import RingConfig
from ..core.state import Ring
from ..core.yamlio import YAMLError, load_yaml

# Keys that name this ring, where it is or the chain around it, never inherited.
OWN_KEYS = ("ring_id", "runs_dir", "continue_from", "resources_dir", "rings")
# Paths resolved by the lock from the parent's RING.json when left empty.
PATH_KEYS = ("task", "candidates", "baseline")


# The dotted keys the command line gave (`--config`), handed from the Snakemake process that
# reads them to the jobs it starts (the lock job inherits again), as a JSON list.
GIVEN_VAR = "RINGFLOW_GIVEN_KEYS"


def _leaf_names(value, prefix: str) -> list[str]:
    if isinstance(value, dict) and value:
        return [n for k, v in value.items() for n in _leaf_names(v, f"{prefix}.{k}")]
    return [prefix]


def command_line_keys(argv: list[str]) -> list[str]:
    """Every dotted key `--config KEY=VALUE ...` sets in argv (a mapping value: its leaves)."""
    from ..core.recovery import _split_config

    names = []
    for item in _split_config(argv)[1]:
        key, _, raw = item.partition("=")
        try:
            value = load_yaml(raw) if raw else None
        except YAMLError:
            value = raw
        names += _leaf_names(value, key.strip())
    return names


def remember_command_line(argv: list[str] | None = None) -> None:
    """In the Snakemake process the user started: note the keys its command line gives,
    for this process and the jobs it starts (which see other command lines)."""
    argv = sys.argv if argv is None else argv
    if GIVEN_VAR in os.environ or not argv or "snakemake" not in argv[0]:
        return  # a job (its parent noted the keys), or not Snakemake's command line
    os.environ[GIVEN_VAR] = json.dumps(sorted(set(command_line_keys(argv))))


def given_keys() -> set[str]:
    try:
        return set(json.loads(os.environ.get(GIVEN_VAR) or "[]"))
    except ValueError:
        return set()


def _is_given(name: str, given: set[str]) -> bool:
    return any(name == g or name.startswith(f"{g}.") for g in given)


def _resolve(path: str, workdir: Path) -> Path:
    p = Path(path).expanduser()
    return (p if p.is_absolute() else workdir / p).resolve()


def parent_lock(continue_from: str | None, workdir: Path | None = None) -> Ring | None:
    """The RING.json of the ring `continue_from` names, or None for a first ring."""
    if not continue_from:
        return None
    previous = _resolve(continue_from, Path(workdir or os.getcwd()))
    lock = RingLayout(previous).ring_json
    if not lock.is_file():
        raise InputError(f"config: continue_from {previous} is not a ring (no RING.json)")
    return Ring.from_record(read_json(lock, what=str(lock)), source=lock)


def _inherit(
    config: dict, default: dict, parent: dict, prefix: str, taken: list[str], given: set[str]
) -> dict:
    out = dict(config)
    for key, value in parent.items():
        name = f"{prefix}{key}"
        if prefix == "" and key in (*OWN_KEYS, *PATH_KEYS):
            continue
        if key not in default or key not in out or name in given:
            continue
        if isinstance(value, dict) and isinstance(out[key], dict):
            out[key] = _inherit(out[key], default[key] or {}, value, f"{name}.", taken, given)
        elif out[key] == default[key] and value != out[key] and not _is_given(name, given):
            out[key] = value
            taken.append(name)
    return out


def inherit_config(
    config: dict,
    defaults: dict,
    workdir: Path | None = None,
    given: set[str] | None = None,
) -> list[str]:
    """Give every key left at its default the parent's value, in place; the keys taken.
    `given`: dotted keys the command line set, which always keep their value (by default
    those the Snakemake process noted: remember_command_line)."""
    parent = parent_lock(config.get("continue_from"), workdir)
    if parent is None:
        return []
    taken: list[str] = []
    given = given_keys() if given is None else given
    config.update(_inherit(config, defaults, parent.config.to_mapping(), "", taken, given))
    return taken


def place_beside_parent(config: dict, defaults: dict, workdir: Path | None = None,
                        given: set[str] | None = None) -> bool:  # fmt: skip
    """A ring that continues a locked ring in another runs folder, with its own `runs_dir`
    left at the default, runs in that folder, beside its parent; in place. True where it
    moved. A chain's ring whose parent is not locked yet keeps the chain's folder."""
    previous = config.get("continue_from")
    given = given_keys() if given is None else given
    if not previous or "runs_dir" in given or config.get("runs_dir") != defaults["runs_dir"]:
        return False
    workdir = Path(workdir or os.getcwd())
    parent = _resolve(previous, workdir)
    if not RingLayout(parent).ring_json.is_file():
        return False
    if parent.parent == _resolve(config["runs_dir"], workdir):
        return False  # already there: the configuration stays as it was written
    config["runs_dir"] = str(parent.parent)
    return True


def parent_paths(config: RingConfig, parent: Ring) -> RingConfig:
    """config with task, candidates and baseline taken from the parent when left empty."""
    return dataclasses.replace(
        config,
        task=config.task or parent.task.dir,
        candidates=config.candidates or parent.candidates_dir,
        baseline=parent.baseline_dir if config.baseline == "" else config.baseline,
    )


def check_same_task(parent: Ring, task_name: str, direction: str, task_dir: Path) -> None:
    """A continuation runs its parent's task: another task or direction is refused."""
    theirs = parent.task
    if (theirs.name, theirs.direction) == (task_name, direction):
        return
    raise InputError(
        f"refusing to continue from {parent.ring_dir}: it ran task {theirs.name!r} "
        f"({theirs.direction}) from {theirs.dir}, and this ring names task "
        f"{task_name!r} ({direction}) from {task_dir}. Scores and guard seeds of a chain "
        "belong to one task: leave task empty to continue it, or start a new chain "
        "(no continue_from) for another task."
    )


def _leaves(config: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update(_leaves(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def describe(parent: Ring | None, config: RingConfig, paths: dict) -> dict | None:
    """What RING.json records about the chain: the parent and every key this ring changed."""
    if parent is None:
        return None
    mine, theirs = _leaves(config.to_mapping()), _leaves(parent.config.to_mapping())
    skip = (*OWN_KEYS, *PATH_KEYS)
    changed = {
        key: {"parent": theirs.get(key), "this": mine.get(key)}
        for key in sorted(set(mine) | set(theirs))
        if key.split(".")[0] not in skip and mine.get(key) != theirs.get(key)
    }
    where = {
        "task": (parent.task.dir, str(paths["task"])),
        "candidates": (parent.candidates_dir, str(paths["candidates"])),
        "baseline": (
            parent.baseline_dir,
            None if paths["baseline"] is None else str(paths["baseline"]),
        ),
    }
    for key, (theirs_path, mine_path) in where.items():
        if theirs_path != mine_path:
            changed[key] = {"parent": theirs_path, "this": mine_path}
    return {"continues": parent.ring_id, "parent_dir": parent.ring_dir, "changed": changed}


def refuse_task_switch(config: RingConfig, workdir: Path | None = None) -> None:
    """At workflow start: refuse a continuation that names another task or direction."""
    from ..task import load_task

    parent = parent_lock(config.continue_from, workdir)
    if parent is None:
        return
    task_dir = _resolve(parent_paths(config, parent).task, Path(workdir or os.getcwd()))
    task = load_task(task_dir)
    check_same_task(parent, task.name, task.direction, task_dir)


def _guarded_on(ancestor: Ring) -> list[str]:
    """The views a ring guarded a finalist on, from its guard verdicts."""
    views: list[str] = []
    for path in RingLayout(Path(ancestor.ring_dir)).verdicts():
        try:
            guard = read_json(path).get("guard") or {}
        except (InputError, OSError, ValueError):
            return list(ancestor.guard_views or [])  # unreadable: as if all were used
        if guard.get("ran", True):
            views += [v for v in guard.get("views") or ancestor.guard_views or [] if v not in views]
    return views


def fresh_guard_views(
    previous: Path | None, guard_views: list[str], views: dict, configured: bool
) -> tuple[list[str], dict | None]:
    """The guard views a continuation scores, and what it knows of their use before.

    The chain's incumbent was chosen on the guard rows of an earlier ring, so its score
    there is biased upward (docs/guard.md#the-incumbent). Where the task declares several
    guard views (and the configuration names none), a continuation keeps those no earlier
    ring of the chain guarded on, while it has one; when every one was used, it reuses
    them all and says so. A view counts as used by its content, whatever its name, and
    only where a ring guarded a finalist on it (one stopped before its guard used none)."""
    from ..core.seeds import chain_rings

    if previous is None or not guard_views:
        return guard_views, None
    used: dict[str, str] = {}
    for ancestor in chain_rings(previous):
        for view in _guarded_on(ancestor):
            content = locked.content_hash if (locked := (ancestor.views or {}).get(view)) else None
            if content:
                used.setdefault(content, ancestor.ring_id)
    before = {v: used[views[v]["content_hash"]] for v in guard_views
              if views[v]["content_hash"] in used}  # fmt: skip
    fresh = [v for v in guard_views if v not in before]
    keep = guard_views if configured or not fresh else fresh
    info = {
        "declared": list(guard_views),
        "used_before": before,
        "reused": sorted(set(keep) & set(before)),
    }
    return keep, info
