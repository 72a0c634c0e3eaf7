"""What to type after a ring ended early: one command, printed as the user can run it.

A stop has a cause (recorded in STOPPED.json) and the cause decides how the work goes on
(docs/recovery.md):

- `task`: the task's scorer or validator failed. Fixing it edits the task, which a locked
  ring refuses (ring/edits.py), so the work continues in a new ring with `continue_from`:
  it replays the stopped ring's weights and scores everything with the fixed scorer.
- `data`: a view changed under the locked ring; the changed data runs in a new ring too.
- `environment`: the candidates' environment differs from the one the ring was locked
  with; a new ring locks the new environment (or restore the old one and rerun).
- `machine`: the sandbox or the weights store failed, or a disk ran full; nothing the ring
  computes changed, so once the machine is fixed (room freed) the same ring continues after
  STOPPED.json is removed.
- no stop file: a job was interrupted (Ctrl-C) or failed; the same command continues.

The command is the one that ran this Snakemake (`RINGFLOW_COMMAND` names a launcher's
own command line instead), with `--config` changed where a new ring is needed.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from pathlib import Path

from .errors import RingflowError
from .jsonio import read_json
from .layout import RingLayout

TASK, DATA, ENVIRONMENT, MACHINE = "task", "data", "environment", "machine"
CAUSES = (TASK, DATA, ENVIRONMENT, MACHINE)
COMMAND_VAR = "RINGFLOW_COMMAND"
CONFIG_FLAGS = ("--config", "-C")


def _stopped(ring_dir) -> Path:
    return RingLayout(Path(ring_dir)).stopped


def user_argv(argv: list[str] | None = None) -> list[str]:
    """The command line that started this workflow, its program named as a user types it
    (its bare name when that is what PATH finds)."""
    if argv is None and os.environ.get(COMMAND_VAR):
        return shlex.split(os.environ[COMMAND_VAR])
    argv = list(sys.argv if argv is None else argv)
    if not argv:
        return ["snakemake"]
    name = os.path.basename(argv[0])
    found = shutil.which(name)
    if found and os.path.realpath(found) == os.path.realpath(argv[0]):
        argv[0] = name
    return argv


def _split_config(argv: list[str]) -> tuple[list[str], list[str]]:
    """(argv without its --config options, the KEY=VALUE items they gave, in order)."""
    rest, items = [], []
    i = 0
    while i < len(argv):
        word = argv[i]
        if word in CONFIG_FLAGS:
            i += 1
            while i < len(argv) and not argv[i].startswith("-"):
                items.append(argv[i])
                i += 1
            continue
        if word.startswith("--config="):
            items.append(word.removeprefix("--config="))
        else:
            rest.append(word)
        i += 1
    return rest, items


def with_config(argv: list[str], drop: tuple[str, ...] = (), **pairs: str) -> list[str]:
    """argv with one `--config` option holding its own items, `pairs` set over them; words
    equal to an item of `drop` (a named ring's target) are left out."""
    rest, items = _split_config(argv)
    rest = [word for word in rest if word not in drop]
    kept = [item for item in items if item.split("=", 1)[0] not in pairs]
    return [*rest, "--config", *kept, *(f"{k}={v}" for k, v in pairs.items())]


def next_ring_id(ring_id: str, runs_dir: Path) -> str:
    """demo -> demo-2, demo-2 -> demo-3: the first such name no ring has taken."""
    match = re.fullmatch(r"(.*)-(\d+)", ring_id)
    stem, number = (match.group(1), int(match.group(2))) if match else (ring_id, 1)
    while True:
        number += 1
        candidate = f"{stem}-{number}"
        if not (runs_dir / candidate).exists():
            return candidate


def stop_cause(ring_root: str | os.PathLike) -> str | None:
    """The recorded cause of a stop (older stop files without one: from their reason)."""
    path = _stopped(ring_root)
    if not path.exists():
        return None
    record = read_json(path)
    if record.get("cause") in CAUSES:
        return record["cause"]
    reason = str(record.get("reason", ""))
    if "scorer" in reason or "validator" in reason:
        return TASK
    if "changed under the locked ring" in reason:
        return DATA
    if "environment differs" in reason:
        return ENVIRONMENT
    return MACHINE


def _shown(path: Path) -> str:
    """A path as the workflow resolves it: relative to its working folder where inside."""
    relative = os.path.relpath(path.resolve(), Path.cwd().resolve())
    return str(path.resolve()) if relative.startswith("..") else relative


def _for_shell(path: Path, argv: list[str]) -> str:
    """A path for a shell command beside the workflow's: absolute when the workflow runs
    in another folder (`--directory`) than the one it is typed in."""
    moved = any(w in ("--directory", "-d") or w.startswith("--directory=") for w in argv)
    return str(path.resolve()) if moved else _shown(path)


def continuation_command(
    ring_root: Path, ring_name: str | None, argv: list[str], **changed: str
) -> str:
    ring_root = Path(ring_root)
    new_id = next_ring_id(ring_root.name, ring_root.parent)
    drop = (ring_name,) if ring_name else ()
    pairs = {**changed, "ring_id": new_id, "continue_from": _shown(ring_root)}
    return shlex.join(with_config(argv, drop, **pairs))


def existing_continuation(ring_root: Path) -> tuple[str, str | None] | None:
    """(ring id, task as given) of the newest ring beside this one that continues it, or
    None: its command, not a third ring's, is the way on."""
    root = Path(ring_root).resolve()
    found = []
    for lock in root.parent.glob("*/RING.json"):
        try:
            record = read_json(lock)
        except (OSError, ValueError, RingflowError):
            continue
        chain = record.get("chain") if isinstance(record, dict) else None
        if not isinstance(chain, dict) or chain.get("parent_dir") != str(root):
            continue
        task = (record.get("config") or {}).get("task")
        found.append((record.get("created_at") or 0, lock.parent.name, task))
    if not found:
        return None
    _, ring_id, task = max(found, key=lambda item: (item[0], item[1]))
    return ring_id, task if isinstance(task, str) else None


def chain_tip(ring_root: Path) -> Path:
    """The newest ring of the chain that continues `ring_root` (through its continuations,
    newest first at each step); `ring_root` itself where none does."""
    tip, seen = Path(ring_root), set()
    while (found := existing_continuation(tip)) is not None and found[0] not in seen:
        seen.add(found[0])
        tip = tip.parent / found[0]
    return tip


def _resume_continuation(root: Path, ring_name: str | None, argv: list[str]) -> list[str]:
    """The lines that point to a ring that continues this one already, if there is one."""
    found = existing_continuation(root)
    if found is None:
        return []
    ring_id, task = found
    pairs = {"ring_id": ring_id, "continue_from": _shown(root)}
    own_task = (read_json(RingLayout(root).ring_json).get("config") or {}).get("task")
    if task and task != own_task:
        pairs["task"] = task
    drop = (ring_name,) if ring_name else ()
    with_task = f" (with the task {task})" if "task" in pairs else ""
    return [
        f"  The ring {ring_id} continues this one already{with_task}. To go on with it, run:",
        f"    {shlex.join(with_config(argv, drop, **pairs))}",
    ]


def _task_copy(ring_root: Path) -> tuple[Path, Path] | None:
    """(the ring's task folder, a free name for a copy beside it), as the workflow names
    them; None for the embedded demo task or a folder that is gone."""
    try:
        given = (read_json(RingLayout(ring_root).ring_json).get("config") or {}).get("task")
    except (OSError, ValueError, RingflowError):
        return None
    if not isinstance(given, str) or not given or not Path(given).is_dir():
        return None
    task = Path(given.rstrip("/") or given)
    number, copy = 1, task.with_name(f"{task.name}-fixed")
    while copy.exists():
        number += 1
        copy = task.with_name(f"{task.name}-fixed{number}")
    return task, copy


def advice(
    ring_root: str | os.PathLike,
    *,
    ring_name: str | None = None,
    edits: list[str] | None = None,
    argv: list[str] | None = None,
) -> list[str]:
    """What went wrong in one sentence, and the one command that continues the work.

    `edits`: what changed under the locked ring (ring/edits.py), when the ring was refused
    for it; `ring_name`: the Snakemake target of a named ring (left out of a new ring's
    command)."""
    root = Path(ring_root)
    argv = user_argv(argv)
    same = shlex.join(argv)
    cause = stop_cause(root)
    if cause is None and edits:
        if resume := _resume_continuation(root, ring_name, argv):
            return [f"ringflow: the ring {root} is locked and what it was given changed "
                    f"since ({edits[0]}).", *resume]  # fmt: skip
        return [
            f"ringflow: the ring {root} is locked and what it was given changed since "
            f"({edits[0]}). A locked ring runs only what it was locked with; to continue the "
            "work in a new ring that takes this one's results and replays its weights, run:",
            f"    {continuation_command(root, ring_name, argv)}",
        ]
    if cause is None:
        lines = [
            f"ringflow: the ring {root} did not finish (interrupted, or a job failed). "
            "To continue it with the same command, run:",
            f"    {same}",
        ]
        if "snakemake" in os.path.basename(argv[0]):  # a launcher may take no --unlock
            lines += [
                "  After a kill -9, Snakemake's lock stays: first run the same command with "
                "--unlock:",
                f"    {shlex.join([*argv, '--unlock'])}",
            ]
        return lines
    reason = read_json(_stopped(root)).get("reason", "unknown")
    head = f"ringflow: the ring {root} stopped: {reason}"
    if cause == MACHINE:
        return [
            head,
            "  This is the machine's failure, not a candidate's. Fix it; to continue this "
            "ring, run:",
            f"    rm {shlex.quote(_for_shell(_stopped(root), argv))} && {same}",
        ]
    if resume := _resume_continuation(root, ring_name, argv):
        return [head, *resume]
    if cause == TASK and (copy := _task_copy(root)) is not None:
        # Fixed in place, the task would no longer be the one this ring was locked with,
        # and `ringflow verify` would say so of this ring (and of every ring it ran in).
        task, fixed = copy
        return [
            head,
            "  The task's own program failed, not a candidate. Fix it in a copy of the task, "
            "so that this ring keeps the task it ran with; the copy runs in a new ring that "
            "continues this one (its weights are replayed, every output is scored with the "
            "fixed scorer). Copy the task and fix the copy:",
            f"    cp -r {shlex.quote(_for_shell(task, argv))} "
            f"{shlex.quote(_for_shell(fixed, argv))}",
            "  then run:",
            f"    {continuation_command(root, ring_name, argv, task=str(fixed))}",
        ]
    why = {
        TASK: "The task's own program failed, not a candidate. Fix it; the fixed task "
        "runs in a new ring that continues this one (its weights are replayed, every "
        "output is scored with the fixed scorer). Once fixed, run:",
        DATA: "The data changed under the locked ring. The changed data runs in a new ring "
        "that continues this one; run:",
        ENVIRONMENT: "The candidates' environment changed since the lock (or restore the old "
        f"environment, remove {_for_shell(_stopped(root), argv)} and run the same "
        "command). To continue in a new ring with the new environment, run:",
    }[cause]
    return [head, f"  {why}", f"    {continuation_command(root, ring_name, argv)}"]


def refusal_hint(ring_dir: str | os.PathLike) -> str:
    """For a job refused by a stopped ring: where the way on is printed."""
    cause = stop_cause(ring_dir)
    if cause == MACHINE:
        return (
            f"fix the cause, then remove {_stopped(ring_dir)} and run the same command to "
            "continue this ring"
        )
    return (
        "continue the work in a new ring with continue_from (the command is printed when "
        "the workflow ends; docs/recovery.md)"
    )
