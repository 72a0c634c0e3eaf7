# Configuration, paths and the ring's DAG logic (ringflow.workflow.dag, tested there).
# No rules here.

import json
import shlex
import sys
from pathlib import Path

from snakemake.utils import validate

from ringflow.config import config_changes, config_defaults
from ringflow.workflow.hooks import refuse_locked
from ringflow.core.layout import NODE_PATTERN, VARIANT_PATTERN, VIEW_PATTERN, RingLayout
from ringflow.ring.named import CHAIN_PARENT_KEY, RING_NAME_KEY
from ringflow.sandbox.slots import gpu_slots
from ringflow.workflow.checkpoints import SnakemakeCheckpoints
from ringflow.workflow.cluster import execution_gpus, slurm_job_options
from ringflow.workflow.dag import RingDag
from ringflow.workflow.resident_client import step_command
from ringflow.workflow.resume import locked_by_another_driver, rerun_interrupted

# The Snakefile gives this ring its whole configuration, checked (and taken from the ring it
# continues where left at a default), and the ring of the chain it waits for, if any;
# validation here fills in the defaults; and the name of its target, if it has one.
CHAIN_PARENT = config.pop(CHAIN_PARENT_KEY, None)
RING_NAME = config.pop(RING_NAME_KEY, None)
validate(config, "../config/config.schema.yaml")

RING = RingLayout(Path(config["runs_dir"]) / config["ring_id"])
# Rules call the package with the interpreter Snakemake runs under, whatever PATH says,
# through the resident server's client (docs/architecture.md#resident-steps). Every path a
# rule's shell command carries is quoted ({...:q}): a checkout, ring or store folder may
# have a space or a `$` in its name.
STEP = shlex.join(step_command(sys.executable))
DEFAULTS = workflow.source_path("../config/config.yaml")


def first_reach():
    """When the DAG first reaches a locked ring: refuse it under another configuration, with
    edited inputs, continuing another task or stopped (workflow/hooks.py); a driver that Snakemake's
    lock will not refuse then sets aside the records of executions a kill interrupted, so
    they run again (workflow/resume.py)."""
    if not workflow.is_main_process or not refuse_locked(
        RING.root, config, DEFAULTS, RING_NAME
    ):
        return False
    if not workflow.dryrun and not locked_by_another_driver(
        RING.root, workflow.persistence, workflow.execution_settings.lock
    ):
        rerun_interrupted(RING.root)
    return True


DAG = RingDag(
    RING,
    config,
    SnakemakeCheckpoints(checkpoints),
    chain_parent=CHAIN_PARENT,
    # profiles/gpu declares the `gpu` resource: one slot per GPU of this machine.
    gpu_slots=gpu_slots(workflow.global_resources),
    refuse=first_reach,
)


def path(p):
    return str(p)


wildcard_constraints:
    node=NODE_PATTERN,
    view=VIEW_PATTERN,
    variant=VARIANT_PATTERN,
    key="[0-9a-f]{64}",
    rank=r"\d+",
    g=r"\d+",
