# Search: every ready candidate gets seed 0 and its --ablate control on every search view,
# the baseline seed 0; the search ends when all of them are scored (or cut at the cutoff).


rule search:
    input:
        search_inputs,
    output:
        search=path(RING.search),
    log:
        log_for("search", "search"),
    conda:
        "../envs/ringflow.yaml"
    params:
        ringflow=RINGFLOW,
        ring=RING.root,
    shell:
        "{params.ringflow} search-summary {params.ring} > {log} 2>&1"


# The search loop (docs/contracts.md#engineer): generation g is a checkpoint that plans new nodes
# once generation g-1's are settled and scored; the last generation is the one planned after
# the hand-over point, at max_nodes, or with no engineer. Each planned node gets one
# engineer session; all sessions of a generation run at once. Settling a generation is a
# checkpoint too: only once its sessions have ended is it known which nodes are executed
# (the others are carried over or rejected).


checkpoint search_generation:
    input:
        generation_inputs,
    output:
        generation=path(RING.generation("{g}")),
    log:
        log_for("search_generation", "gen-{g}"),
    priority: session_priority
    conda:
        "../envs/ringflow.yaml"
    params:
        ringflow=RINGFLOW,
        ring=RING.root,
    shell:
        "{params.ringflow} plan-generation {params.ring} {wildcards.g} > {log} 2>&1"


rule engineer:
    input:
        engineer_inputs,
    output:
        session=path(RING.session("{node}")),
    log:
        log_for("engineer", "{node}"),
    priority: session_priority
    conda:
        "../envs/ringflow.yaml"
    params:
        ringflow=RINGFLOW,
        ring=RING.root,
    shell:
        "{params.ringflow} engineer {params.ring} {wildcards.node} > {log} 2>&1"


checkpoint settle_generation:
    input:
        settle_inputs,
    output:
        settled=path(RING.settled("{g}")),
    log:
        log_for("settle_generation", "gen-{g}"),
    conda:
        "../envs/ringflow.yaml"
    params:
        ringflow=RINGFLOW,
        ring=RING.root,
    shell:
        "{params.ringflow} settle-generation {params.ring} {wildcards.g} > {log} 2>&1"


rule search_loop:
    input:
        search_loop_inputs,
    output:
        loop=path(RING.search_loop),
    log:
        log_for("search_loop", "loop"),
    conda:
        "../envs/ringflow.yaml"
    params:
        ringflow=RINGFLOW,
        ring=RING.root,
    shell:
        "{params.ringflow} search-loop {params.ring} > {log} 2>&1"
