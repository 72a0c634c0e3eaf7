# Import: lock the ring (configuration, evaluation spec, clock, guard seeds), then create
# its nodes from the baseline and the candidates, with their weights keys fixed.


rule lock_ring:
    input:
        DAG.chain_parent_inputs("stop_manifest"),
    output:
        lock=path(RING.ring_json),
    log:
        DAG.log("lock_ring", "ring"),
    conda:
        "../envs/ringflow.yaml"
    params:
        step=STEP,
        ring=RING.root,
        config=json.dumps(config_changes(config, config_defaults(DEFAULTS))),
        defaults=DEFAULTS,
    # The step writes its log itself and says a refusal on stderr too, where the driver's
    # output shows it.
    shell:
        "{params.step} lock-ring {params.ring:q} --out {output.lock:q} --config {params.config:q}"
        " --defaults {params.defaults:q} --log {log:q}"


checkpoint import_nodes:
    input:
        unpack(DAG.once_made(lock="ring_json", carryover="carryover_imported")),
    output:
        nodes=path(RING.nodes_static),
    log:
        DAG.log("import_nodes", "nodes"),
    conda:
        "../envs/ringflow.yaml"
    params:
        step=STEP,
        ring=RING.root,
    shell:
        "{params.step} import-nodes {params.ring:q} --out {output.nodes:q} > {log:q} 2>&1"
