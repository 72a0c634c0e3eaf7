# ringflow: time-boxed rings of an ML search (see README.md and docs/architecture.md). The Snakefile
# is a table of contents: every ring is the module rules/ring.smk with its own configuration;
# each stage of a ring lives in its own rule file.

from snakemake.utils import min_version

from ringflow.ring.named import (
    invocation_rings,
    module_config,
    ring_targets,
    workflow_rings,
)
from ringflow.workflow.cluster import driver_rules, end_on_slurm, start_on_slurm
from ringflow.workflow.hooks import (
    end_rings,
    prepare_config,
    prepare_ring_config,
    start_rings,
)

min_version("9.0")


configfile: workflow.source_path("config/config.yaml")


SCHEMA = workflow.source_path("config/config.schema.yaml")
prepare_config(config, SCHEMA, workflow.source_path("config/config.yaml"))
# The configured ring (ring_id), and every ring a chain file names (with no configuration
# file, the demo chain): `snakemake ring2` runs ring 2, after ring 1 if ring 1 has not run.
DEMO_CHAIN = workflow.source_path("config/chain.yaml")
RINGS, CONFIGURED = workflow_rings(
    config, None if workflow.config_settings.configfiles else DEMO_CHAIN
)
RING_CONFIGS = {
    ring.name: prepare_ring_config(
        ring, SCHEMA, workflow.source_path("config/config.yaml")
    )
    for ring in RINGS
}
INVOCATION = []

for RING in RINGS:
    RING_NAME, RING_PREFIX = RING.name, RING.prefix
    BEFORE = {rule.name for rule in workflow.rules}

    module:
        name: RING_NAME
        snakefile:
            "rules/ring.smk"
        config:
            module_config(RING, RING_CONFIGS[RING_NAME])

    use rule * from RING_NAME as RING_PREFIX*

    # On a cluster only the executions and the engineer sessions are jobs of their own;
    # every bookkeeping step runs on the driver (docs/slurm.md#what-runs-where). The
    # `localrules:` directive would not see the module's prefixed names.
    workflow.localrules(
        *driver_rules({rule.name for rule in workflow.rules} - BEFORE, RING_PREFIX)
    )


onstart:
    INVOCATION[:] = invocation_rings(
        RINGS, CONFIGURED, workflow.dag_settings.targets
    )
    start_rings(INVOCATION, RING_CONFIGS, workflow)
    start_on_slurm(workflow, INVOCATION, RING_CONFIGS)


onsuccess:
    end_rings(INVOCATION, log, completed=True)


onerror:
    end_on_slurm(workflow, INVOCATION)
    end_rings(INVOCATION, log, completed=False)


rule all:
    default_target: True
    input:
        lambda wildcards: ring_targets(CONFIGURED.root),


for RING in RINGS:
    if RING.prefix:

        rule:
            name:
                RING.name
            input:
                lambda wildcards, root=RING.root: ring_targets(root),
