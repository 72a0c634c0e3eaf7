# Execute: one run of a node's program on a view under a seed and variant, inside the
# sandbox and under the health supervisor. A failing candidate is a recorded status in
# result.json, never a failed job. Each weights key gets a target made by its trainer.


rule execute:
    input:
        unpack(execution_inputs),
    output:
        result=path(RING.result("{node}", "{view}", "{variant}")),
    log:
        log_for("execute", "{node}.{view}.{variant}"),
    threads: execution_threads
    priority: execution_priority
    shell:
        "{RINGFLOW} execute {RING.root} {wildcards.node} {wildcards.view} {wildcards.variant}"
        " > {log} 2>&1"


rule weights_key:
    input:
        unpack(key_target_inputs),
    output:
        target=path(RING.key_target("{key}")),
    log:
        log_for("weights_key", "{key}"),
    shell:
        "{RINGFLOW} key-target {RING.root} {wildcards.key} > {log} 2>&1"
