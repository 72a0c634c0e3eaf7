# Final selection: the baseline goes to final/ first; each finalist, in rank order, is
# reviewed (view-blind check: a screen on two disguised copies, more when it flags a
# program whose output varies) and guarded against the baseline on
# fresh seeds on the guard views; the first whose paired bootstrap LCB clears the margin
# replaces the baseline. After the decision, when time remains: the reproduction check and
# the other guarded finalists' final-view runs (diagnostics; they decide nothing).


checkpoint seat_baseline:
    input:
        search=path(RING.search),
    output:
        seated=path(RING.seated),
    log:
        log_for("seat_baseline", "baseline"),
    conda:
        "../envs/ringflow.yaml"
    params:
        ringflow=RINGFLOW,
        ring=RING.root,
    shell:
        "{params.ringflow} seat-baseline {params.ring} > {log} 2>&1"


checkpoint screen:
    input:
        screen_inputs,
    output:
        screen=path(RING.screen("{node}")),
    log:
        log_for("screen", "{node}"),
    conda:
        "../envs/ringflow.yaml"
    params:
        ringflow=RINGFLOW,
        ring=RING.root,
    shell:
        "{params.ringflow} screen {params.ring} {wildcards.node} > {log} 2>&1"


checkpoint review:
    input:
        review_inputs,
    output:
        review=path(RING.review("{node}")),
    log:
        log_for("review", "{node}"),
    conda:
        "../envs/ringflow.yaml"
    params:
        ringflow=RINGFLOW,
        ring=RING.root,
    shell:
        "{params.ringflow} review {params.ring} {wildcards.node} > {log} 2>&1"


checkpoint verdict:
    input:
        verdict_inputs,
    output:
        verdict=path(RING.verdict("{rank}")),
    log:
        log_for("verdict", "{rank}"),
    conda:
        "../envs/ringflow.yaml"
    params:
        ringflow=RINGFLOW,
        ring=RING.root,
    shell:
        "{params.ringflow} verdict {params.ring} {wildcards.rank} > {log} 2>&1"


checkpoint decide:
    input:
        decision_inputs,
    output:
        decision=path(RING.decision),
    log:
        log_for("decide", "decision"),
    conda:
        "../envs/ringflow.yaml"
    params:
        ringflow=RINGFLOW,
        ring=RING.root,
    shell:
        "{params.ringflow} decide {params.ring} > {log} 2>&1"


rule reproduce:
    input:
        repro_inputs,
    output:
        repro=path(RING.repro_record),
    log:
        log_for("reproduce", "repro"),
    conda:
        "../envs/ringflow.yaml"
    params:
        ringflow=RINGFLOW,
        ring=RING.root,
    shell:
        "{params.ringflow} repro {params.ring} > {log} 2>&1"
