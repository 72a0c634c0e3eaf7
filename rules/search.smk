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
