# Final selection: the baseline goes to final/ first; each finalist, in rank order, is
# reviewed (view-blind check) and guarded against the baseline on fresh seeds; the first
# whose paired LCB clears the margin replaces the baseline. Then the reproduction check.


checkpoint seat_baseline:
    input:
        search=path(RING.search),
    output:
        seated=path(RING.seated),
    log:
        log_for("seat_baseline", "baseline"),
    shell:
        "{RINGFLOW} seat-baseline {RING.root} > {log} 2>&1"


checkpoint review:
    input:
        review_inputs,
    output:
        review=path(RING.review("{node}")),
    log:
        log_for("review", "{node}"),
    shell:
        "{RINGFLOW} review {RING.root} {wildcards.node} > {log} 2>&1"


checkpoint verdict:
    input:
        verdict_inputs,
    output:
        verdict=path(RING.verdict("{rank}")),
    log:
        log_for("verdict", "{rank}"),
    shell:
        "{RINGFLOW} verdict {RING.root} {wildcards.rank} > {log} 2>&1"


rule decide:
    input:
        decision_inputs,
    output:
        decision=path(RING.decision),
    log:
        log_for("decide", "decision"),
    shell:
        "{RINGFLOW} decide {RING.root} > {log} 2>&1"


rule reproduce:
    input:
        repro_inputs,
    output:
        repro=path(RING.repro_record),
    log:
        log_for("reproduce", "repro"),
    shell:
        "{RINGFLOW} repro {RING.root} > {log} 2>&1"
