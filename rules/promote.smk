# Promote: the top promote_top_k nodes by seed-0 score get seeds 1 and 2; finalists are
# ranked by the 3-seed mean.


checkpoint promote:
    input:
        search=path(RING.search),
    output:
        promotion=path(RING.promotion),
    log:
        log_for("promote", "promote"),
    conda:
        "../envs/ringflow.yaml"
    params:
        ringflow=RINGFLOW,
        ring=RING.root,
    shell:
        "{params.ringflow} promote {params.ring} > {log} 2>&1"


checkpoint rank:
    input:
        promotion=path(RING.promotion),
        scores=promoted_inputs,
    output:
        ranking=path(RING.ranking),
    log:
        log_for("rank", "rank"),
    conda:
        "../envs/ringflow.yaml"
    params:
        ringflow=RINGFLOW,
        ring=RING.root,
    shell:
        "{params.ringflow} rank {params.ring} > {log} 2>&1"
