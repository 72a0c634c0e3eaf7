"""What the Snakefile does around its rings: check each ring's configuration as the
workflow is read, and when Snakemake starts and ends, for every ring it runs, the refusals,
the timekeeper, the Ctrl-C relay, the progress lines and the summary.

Refusals are checked when the DAG first reaches a ring (its input functions call
`refuse_locked`): only then is it known which rings a command needs, and a ring it does not
need (another ring of the demo chain, say) never refuses it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from .. import timekeeper
from ..config import check_config, coerce_config, config_defaults, config_problems
from ..errors import InputError
from ..interrupts import install_relay
from ..reporting.progress import ring_end, ring_start
from ..sandbox.slots import gpu_declared, gpu_slots
from .chain import inherit_config, refuse_task_switch, remember_command_line
from .edits import refuse_edits
from .lock import check_existing_lock
from .named import NamedRing


def prepare_config(config: dict, schema_path: str) -> None:
    """The workflow's configuration, coerced (values given on the command line are text) and
    checked, in place; each ring's overrides are checked with the ring."""
    remember_command_line()
    coerce_config(config, schema_path)
    check_config(config, schema_path)


def _parent_locked(config: dict) -> bool:
    previous = config.get("continue_from")
    return not previous or (Path(previous) / "RING.json").is_file()


def prepare_ring_config(ring: NamedRing, schema_path: str, defaults_path: str) -> dict:
    """One ring's whole configuration. A ring that continues a ring of the chain not yet
    locked takes its parent's configuration when it is locked itself."""
    config = dict(ring.config)
    if ring.prefix:
        with open(schema_path) as handle:
            schema = yaml.safe_load(handle)
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


def refuse_locked(root: Path, config: dict, defaults_path: str) -> bool:
    """A locked ring under another configuration, or with edited inputs, or continuing
    another task: refused before anything of it runs. False while the ring is not locked
    (the lock itself checks a new ring)."""
    if not (Path(root) / "RING.json").is_file():
        return False
    config = dict(config)
    if _parent_locked(config):
        # A ring of a chain read before its parent was locked took the parent's
        # configuration at its own lock: compare with that.
        inherit_config(config, config_defaults(defaults_path))
    try:
        check_existing_lock(config)
        refuse_edits(root, config["ring_id"])
        if _parent_locked(config):
            refuse_task_switch(config)
    except InputError as exc:
        # Snakemake shows a refusal inside the traceback of an input function: say it first.
        print(f"ringflow: error: {exc}", file=sys.stderr, flush=True)
        raise
    return True


def start_rings(rings: list[NamedRing], configs: dict[str, dict], workflow) -> None:
    """onstart: each ring's timekeeper, Ctrl-C relay and progress lines."""
    # Jobs on a cluster's nodes bring their own GPUs (checked against the partition there);
    # on this machine a profile that declares GPUs gets as many slots as NVML sees, 0 too.
    local = not getattr(workflow, "non_local_exec", False)
    declared = local and gpu_declared(workflow.global_resources)
    slots = gpu_slots(workflow.global_resources)
    for ring in rings:
        config = configs[ring.name]
        per_execution = config["gpus_per_execution"] or 1
        timekeeper.record_slots(ring.root, workflow, slots if declared else (slots or None),
                                per_execution, gpu_profile=declared)  # fmt: skip
        timekeeper.start_in_background(ring.root)
        install_relay(ring.root)
        ring_start(ring.root, config["terminal"])


def end_rings(rings: list[NamedRing], log, completed: bool) -> None:
    """onsuccess/onerror: every ring ends with its summary and failure digest, however it
    ended; after a failure, why the ring stopped and the command that continues it."""
    for index, ring in enumerate(rings):
        timekeeper.tick_safely(ring.root)
        last = index == len(rings) - 1
        ring_end(ring.root, log if last else None, completed, ring.name if ring.prefix else None)
