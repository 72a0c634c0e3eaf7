# Search: every ready candidate gets seed 0 and its --ablate control on every search view,
# the baseline seed 0; the search ends when all of them are scored (or cut at the cutoff).


rule search:
    input:
        search_inputs,
    output:
        search=path(RING.search),
    log:
        log_for("search", "search"),
    shell:
        "{RINGFLOW} search-summary {RING.root} > {log} 2>&1"
