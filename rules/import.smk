# Import: lock the ring (configuration, evaluation spec, clock, guard seeds), then create
# its nodes from the baseline and the candidates, with their weights keys fixed.


rule lock_ring:
    output:
        lock=path(RING.ring_json),
    log:
        log_for("lock_ring", "ring"),
    script:
        "../scripts/lock_ring.py"


checkpoint import_nodes:
    input:
        lock=ancient(path(RING.ring_json)),
    output:
        index=path(RING.nodes_index),
    log:
        log_for("import_nodes", "nodes"),
    shell:
        "{RINGFLOW} import-nodes {RING.root} > {log} 2>&1"
