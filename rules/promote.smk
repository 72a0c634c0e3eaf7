# Promote: the top promote_top_k nodes by seed-0 score get seeds 1 and 2; finalists are
# ranked by the 3-seed mean.


checkpoint promote:
    input:
        search=path(RING.search),
    output:
        promotion=path(RING.promotion),
    log:
        DAG.log("promote", "promote"),
    conda:
        "../envs/ringflow.yaml"
    params:
        step=STEP,
        ring=RING.root,
    shell:
        "{params.step} promote {params.ring:q} --out {output.promotion:q} > {log:q} 2>&1"


checkpoint rank:
    input:
        promotion=path(RING.promotion),
        scores=DAG.promoted_inputs,
    output:
        ranking=path(RING.ranking),
    log:
        DAG.log("rank", "rank"),
    conda:
        "../envs/ringflow.yaml"
    params:
        step=STEP,
        ring=RING.root,
    shell:
        "{params.step} rank {params.ring:q} --out {output.ranking:q} > {log:q} 2>&1"
