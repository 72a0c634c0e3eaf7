"""What the Snakefile does around its rings: check each ring's configuration as the
workflow is read, and when Snakemake starts and ends, for every ring it runs, the refusals,
the timekeeper, the Ctrl-C relay, the progress lines, the digests sent (notify) and the
summary.

Refusals are checked when the DAG first reaches a ring (its input functions call
`refuse_locked`): only then is it known which rings a command needs, and a ring it does not
need (another ring of the demo chain, say) never refuses it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..config import check_config, coerce_config, config_defaults, config_problems
from ..core.clock import load_ring, refuse_moved_ring
from ..core.errors import InputError
from ..core.layout import RingLayout
from ..core.recovery import advice, chain_tip, continuation_command, user_argv
from ..core.settings import RingConfig
from ..core.stop import keep_stop_reserve
from ..core.yamlio import load_yaml
from ..reporting import notify
from ..reporting.progress import ring_end, ring_start
from ..ring.boxes import remove_abandoned_boxes
from ..ring.chain import (
    inherit_config,
    place_beside_parent,
    refuse_task_switch,
    remember_command_line,
)
from ..ring.edits import find_edits, refuse_edits
from ..ring.janitor import start_janitor
from ..ring.lease import hold_leases, release_leases
from ..ring.lock import check_existing_lock, config_differences
from ..ring.named import NamedRing
from ..sandbox.slots import gpu_declared, gpu_slots
from ..selection import timekeeper
from ..weights.store import WeightsStore
from .cluster import slots_on_slurm
from .driver_steps import send_local_steps
from .relay import install_relay
from .resident_steps import start_server
from .scheduler_wakeups import one_pending_wakeup


def prepare_config(config: dict, schema_path: str, defaults_path: str) -> None:
    """The workflow's configuration, coerced (values given on the command line are text) and
    checked, in place; each ring's overrides are checked with the ring. A continuation
    whose runs folder is left at the default runs beside the ring it continues."""
    remember_command_line()
    coerce_config(config, schema_path)
    check_config(config, schema_path)
    if place_beside_parent(config, config_defaults(defaults_path)):
        print(
            f"ringflow: ring {config['ring_id']} runs beside the ring it continues, in "
            f"{config['runs_dir']} (runs_dir=FOLDER puts it elsewhere)",
            file=sys.stderr,
        )


def _parent_locked(config: dict) -> bool:
    previous = config.get("continue_from")
    return not previous or RingLayout(Path(previous)).ring_json.is_file()


def prepare_ring_config(ring: NamedRing, schema_path: str, defaults_path: str) -> dict:
    """One ring's whole configuration. A ring that continues a ring of the chain not yet
    locked takes its parent's configuration when it is locked itself."""
    config = dict(ring.config)
    if ring.prefix:
        with open(schema_path) as handle:
            schema = load_yaml(handle)
        coerced = dict(config)
        coerce_config(coerced, schema_path)
        problems = config_problems(coerced, schema)
        if problems:
            raise InputError(
                f"chain: ring {ring.name}: invalid configuration:\n  " + "\n  ".join(problems)
            )
        config = coerced
    if ring.parent is None or _parent_locked(config):
        inherit_config(config, config_defaults(defaults_path))
    return config


class RunRefused(SystemExit):
    """A command refused before anything of it runs, its reason printed once: Snakemake
    lets this exit through an input function, where it would print any other exception
    again inside a traceback of the function."""


def refuse_locked(
    root: Path, config: dict, defaults_path: str, ring_name: str | None = None
) -> bool:
    """A locked ring under another configuration, or with edited inputs, or continuing
    another task, or stopped: refused before anything of it runs (RunRefused). A finished
    ring is not refused: nothing of it runs again, and what changed since is said in a note.
    False while the ring is not locked (the lock itself checks a new ring)."""
    layout = RingLayout(Path(root))
    if not layout.ring_json.is_file():
        return False
    config = dict(config)
    if _parent_locked(config):
        # A ring of a chain read before its parent was locked took the parent's
        # configuration at its own lock: compare with that.
        inherit_config(config, config_defaults(defaults_path))
    try:
        # Its steps would refuse it one by one (docs/ring-folder.md#the-lock-and-the-clock).
        refuse_moved_ring(root)
        settings = RingConfig.from_mapping(config)
        if layout.stop_manifest.exists():
            _note_changes_to_finished(root, config, defaults_path, ring_name)
            return True
        check_existing_lock(settings)
        refuse_edits(root, settings.ring_id)
        if _parent_locked(config):
            refuse_task_switch(settings)
    except InputError as exc:
        print(f"ringflow: error: {exc}", file=sys.stderr, flush=True)
        raise RunRefused(1) from None
    if layout.stopped.exists():
        # Every job of it would refuse to start: say why once, with the way on, up front.
        print("\n".join(advice(root, ring_name=ring_name)), file=sys.stderr, flush=True)
        raise RunRefused(1)
    return True


def _note_changes_to_finished(
    root: Path, config: dict, defaults_path: str, ring_name: str | None
) -> None:
    """What changed since a finished ring was locked, which no longer reaches it; and the
    way to run with it: a ring that continues the chain (of the chain file, for its rings)."""
    changed = []
    if differ := _continued_differences(root, config, defaults_path):
        changed.append(f"the configuration (differs in: {', '.join(differ)})")
    changed += find_edits(root)
    if not changed:
        return
    if ring_name is not None:
        way_on = (f"The rings of the chain that continue {ring_name} take them: a ring locks "
                  "what it is given when it starts.")  # fmt: skip
    elif (tip := chain_tip(root)) == Path(root):
        way_on = (
            "To run with the changes in a new ring that continues this one (its results "
            "taken, its weights replayed), run:\n    "
            + continuation_command(Path(root), None, user_argv())
        )
    elif RingLayout(tip).stop_manifest.exists() or RingLayout(tip).stopped.exists():
        way_on = (
            f"The ring {tip.name} continues its chain already. To run with the changes in a "
            "new ring that continues it, run:\n    " + continuation_command(tip, None, user_argv())
        )
    else:
        way_on = (f"The ring {tip.name} continues its chain already and has not "
                  f"finished: finish it, then continue it (continue_from={tip}).")  # fmt: skip
    print(
        f"ringflow: note: the ring {root} has finished, and a finished ring does not run "
        "again, so what changed since it was locked does not reach it:\n  "
        + "\n  ".join(changed)
        + f"\n{way_on}",
        file=sys.stderr,
        flush=True,
    )


def _continued_differences(root: Path, config: dict, defaults_path: str) -> list[str]:
    """The configuration keys in which a ring continuing `root` under this command would
    differ from it: it takes the finished ring's value for every key left at its default
    (ring/chain.py), so only the keys this command sets count as changes."""
    continued = {**config, "continue_from": str(root)}
    inherit_config(continued, config_defaults(defaults_path))
    differ = config_differences(load_ring(root), RingConfig.from_mapping(continued))
    return [key for key in differ if key not in ("ring_id", "continue_from")]


def start_rings(rings: list[NamedRing], configs: dict[str, dict], workflow) -> None:
    """onstart: the driver lease of every ring first (a second driver of a ring is refused
    before anything of it runs), what killed runs left, the janitor for this run, then
    each ring's timekeeper, Ctrl-C relay and progress lines."""
    one_pending_wakeup(getattr(workflow, "scheduler", None))
    # A finished ring is immutable: nothing of it runs again, and nothing is written to it.
    rings = [ring for ring in rings if not RingLayout(ring.root).stop_manifest.exists()]
    if not rings:
        return
    settings = {ring.name: RingConfig.from_mapping(configs[ring.name]) for ring in rings}
    for note in hold_leases([ring.root for ring in rings], " ".join(sys.argv)):
        print(note, file=sys.stderr)
    for ring in rings:
        remove_debris(ring.root, settings[ring.name])
        keep_stop_reserve(ring.root)
    _JANITOR[:] = [_start_janitor(rings, settings)]
    declared, slots = gpu_slots_here(workflow)
    for ring in rings:
        config = settings[ring.name]
        per_execution = config.gpus_per_execution or 1
        timekeeper.record_slots(ring.root, workflow, slots if declared else (slots or None),
                                per_execution, gpu_profile=declared,
                                cluster_slots=slots_on_slurm(workflow, ring.prefix,
                                                             configs[ring.name]))  # fmt: skip
        timekeeper.start_in_background(ring.root)
        ring_start(
            ring.root, config.terminal, 0 if config.slurm is None else config.slurm.pending_warn_min
        )
        notify.ring_start(ring.root, config.notify)
    install_relay([ring.root for ring in rings])
    # The steps this machine runs (all of them; on a cluster the bookkeeping steps, while
    # the executions are jobs whose steps never ask it) start as forks of a process that
    # has ringflow imported (docs/architecture.md#resident-steps); a local job's step goes
    # from the driver to that server without a process of its own.
    _RESIDENT[:] = [server for server in [start_server()] if server is not None]
    for server in _RESIDENT:
        send_local_steps(workflow, server.path)


def gpu_slots_here(workflow) -> tuple[bool, int | None]:
    """(whether the profile declares GPUs on this machine, the GPU slots it gets).

    On this machine a profile that declares GPUs gets as many slots as NVML sees, 0 too.
    Jobs on a cluster's nodes bring their own GPUs (the lock's probe job checks them
    there): the profile's `gpu` figure stays, whatever GPUs the driver's machine has."""
    if getattr(workflow, "non_local_exec", False):
        return False, None
    declared = gpu_declared(workflow.global_resources)
    slots = gpu_slots(workflow.global_resources)
    return declared, slots


_JANITOR: list = []  # the janitor's Popen, kept for the driver's life
_RESIDENT: list = []  # the resident step server, while the driver runs steps


def _store_of(config: RingConfig) -> Path:
    return Path(config.store).expanduser().resolve()


def _start_janitor(rings: list[NamedRing], configs: dict[str, RingConfig]):
    """What a kill of the whole workflow leaves is removed once the driver is gone, after
    the supervisors' grace for stopping their programs."""
    graces = [configs[r.name].exec_health.term_grace_s for r in rings]
    grace = max(graces, default=60)
    pairs = [(Path(ring.root), _store_of(configs[ring.name])) for ring in rings]
    return start_janitor(pairs, settle_s=float(grace) + 30)


def remove_debris(ring_root: Path, config: RingConfig) -> None:
    """What killed runs of a ring left: their boxes (a replay's hard links into the store
    among them) and their registrations' temporary files in the store, each removed once
    its holder is gone (its flock is free); a live run's are left alone."""
    boxes = remove_abandoned_boxes(ring_root)
    if boxes:
        print(f"ringflow: the ring {ring_root}: removed {len(boxes)} folder(s) that killed "
              f"runs left in {RingLayout(Path(ring_root)).boxes}", file=sys.stderr)  # fmt: skip
    store_root = _store_of(config)
    if (store_root / "objects").is_dir():
        removed, _in_use = WeightsStore(store_root).remove_dead_leftovers()
        if removed:
            print(f"ringflow: the store {store_root}: removed {len(removed)} temporary "
                  "file(s) of killed registrations", file=sys.stderr)  # fmt: skip


def end_rings(rings: list[NamedRing], log, completed: bool) -> None:
    """onsuccess/onerror: every ring ends with its summary and failure digest, however it
    ended; after a failure, why the ring stopped and the command that continues it."""
    for index, ring in enumerate(rings):
        timekeeper.tick_safely(ring.root)
        last = index == len(rings) - 1
        notify.ring_end(ring.root)
        ring_end(ring.root, log if last else None, completed, ring.name if ring.prefix else None)
        # A job killed on its own (not the driver) leaves its box: the run ends without it.
        remove_abandoned_boxes(ring.root)
    release_leases()
    while _RESIDENT:
        _RESIDENT.pop().stop()
