# Search: every ready candidate gets seed 0 and its --ablate control on every search view,
# the baseline seed 0; the search ends when all of them are scored (or cut at the cutoff).


rule search:
    input:
        DAG.search_inputs,
    output:
        search=path(RING.search),
    log:
        DAG.log("search", "search"),
    conda:
        "../envs/ringflow.yaml"
    params:
        step=STEP,
        ring=RING.root,
    shell:
        "{params.step} search-summary {params.ring:q} --out {output.search:q} > {log:q} 2>&1"


# The search loop (docs/contracts.md#engineer): generation g is a checkpoint that plans new nodes
# once generation g-1's are settled and scored; the last generation is the one planned after
# the hand-over point, at max_nodes, or with no engineer. Each planned node gets one
# engineer session; all sessions of a generation run at once. Settling a generation is a
# checkpoint too: only once its sessions have ended is it known which nodes are executed
# (the others are carried over or rejected).


checkpoint search_generation:
    input:
        DAG.generation_inputs,
    output:
        generation=path(RING.generation("{g}")),
    log:
        DAG.log("search_generation", "gen-{g}"),
    priority: DAG.session_priority
    conda:
        "../envs/ringflow.yaml"
    params:
        step=STEP,
        ring=RING.root,
    shell:
        "{params.step} plan-generation {params.ring:q} {wildcards.g:q}"
        " --out {output.generation:q} > {log:q} 2>&1"


rule engineer:
    input:
        DAG.engineer_inputs,
    output:
        session=path(RING.session("{node}")),
    log:
        DAG.log("engineer", "{node}"),
    priority: DAG.session_priority
    conda:
        "../envs/ringflow.yaml"
    resources:
        # A scheduler's limit (SLURM's --time) for the session's job, from the ring's clock;
        # on SLURM its priority as a nice value, and no requeue.
        runtime=DAG.session_runtime,
        slurm_extra=lambda wc: slurm_job_options(DAG.session_priority(wc)),
    params:
        step=STEP,
        ring=RING.root,
    shell:
        "{params.step} engineer {params.ring:q} {wildcards.node:q}"
        " --out {output.session:q} > {log:q} 2>&1"


checkpoint settle_generation:
    input:
        DAG.settle_inputs,
    output:
        settled=path(RING.settled("{g}")),
    log:
        DAG.log("settle_generation", "gen-{g}"),
    conda:
        "../envs/ringflow.yaml"
    params:
        step=STEP,
        ring=RING.root,
    shell:
        "{params.step} settle-generation {params.ring:q} {wildcards.g:q}"
        " --out {output.settled:q} > {log:q} 2>&1"


rule search_loop:
    input:
        DAG.search_loop_inputs,
    output:
        loop=path(RING.search_loop),
    log:
        DAG.log("search_loop", "loop"),
    conda:
        "../envs/ringflow.yaml"
    params:
        step=STEP,
        ring=RING.root,
    shell:
        "{params.step} search-loop {params.ring:q} --out {output.loop:q} > {log:q} 2>&1"
