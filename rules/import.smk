# Import: lock the ring (configuration, evaluation spec, clock, guard seeds), then create
# its nodes from the baseline and the candidates, with their weights keys fixed.


rule lock_ring:
    input:
        chain_parent_inputs("stop_manifest"),
    output:
        lock=path(RING.ring_json),
    log:
        log_for("lock_ring", "ring"),
    conda:
        "../envs/ringflow.yaml"
    params:
        config=config,
    script:
        "../scripts/lock_ring.py"


checkpoint import_nodes:
    input:
        lock=ancient(path(RING.ring_json)),
        carryover=ancient(path(RING.carryover_imported)),
    output:
        index=path(RING.nodes_index),
    log:
        log_for("import_nodes", "nodes"),
    conda:
        "../envs/ringflow.yaml"
    params:
        ringflow=RINGFLOW,
        ring=RING.root,
    shell:
        "{params.ringflow} import-nodes {params.ring} > {log} 2>&1"
