# Final selection: the baseline's probe runs estimate the guard's power beside the search;
# the baseline (in a chain, the incumbent) goes to final/ first; each finalist, in rank order, is
# reviewed (view-blind check: a screen on two disguised copies, more when it flags a
# program whose output varies) and guarded against the baseline on
# fresh seeds on the guard views; the first whose paired bootstrap LCB clears the margin
# replaces the baseline. After the decision, when time remains: the reproduction check and
# the other guarded finalists' final-view runs (diagnostics; they decide nothing).


rule power:
    input:
        DAG.power_inputs,
    output:
        power=path(RING.power),
    log:
        DAG.log("power", "power"),
    conda:
        "../envs/ringflow.yaml"
    params:
        step=STEP,
        ring=RING.root,
    shell:
        "{params.step} power {params.ring:q} --out {output.power:q} > {log:q} 2>&1"


checkpoint seat_baseline:
    input:
        search=path(RING.search),
    output:
        seated=path(RING.seated),
    log:
        DAG.log("seat_baseline", "baseline"),
    conda:
        "../envs/ringflow.yaml"
    params:
        step=STEP,
        ring=RING.root,
    shell:
        "{params.step} seat-baseline {params.ring:q} --out {output.seated:q} > {log:q} 2>&1"


checkpoint screen:
    input:
        DAG.screen_inputs,
    output:
        screen=path(RING.screen("{node}")),
    log:
        DAG.log("screen", "{node}"),
    conda:
        "../envs/ringflow.yaml"
    params:
        step=STEP,
        ring=RING.root,
    shell:
        "{params.step} screen {params.ring:q} {wildcards.node:q} --out {output.screen:q} > {log:q} 2>&1"


checkpoint review:
    input:
        DAG.review_inputs,
    output:
        review=path(RING.review("{node}")),
    log:
        DAG.log("review", "{node}"),
    conda:
        "../envs/ringflow.yaml"
    params:
        step=STEP,
        ring=RING.root,
    shell:
        "{params.step} review {params.ring:q} {wildcards.node:q} --out {output.review:q} > {log:q} 2>&1"


checkpoint verdict:
    input:
        DAG.verdict_inputs,
    output:
        verdict=path(RING.verdict("{rank}")),
    log:
        DAG.log("verdict", "{rank}"),
    conda:
        "../envs/ringflow.yaml"
    params:
        step=STEP,
        ring=RING.root,
    shell:
        "{params.step} verdict {params.ring:q} {wildcards.rank:q} --out {output.verdict:q} > {log:q} 2>&1"


checkpoint decide:
    input:
        DAG.decision_inputs,
    output:
        decision=path(RING.decision),
    log:
        DAG.log("decide", "decision"),
    conda:
        "../envs/ringflow.yaml"
    params:
        step=STEP,
        ring=RING.root,
    shell:
        "{params.step} decide {params.ring:q} --out {output.decision:q} > {log:q} 2>&1"


rule reproduce:
    input:
        DAG.repro_inputs,
    output:
        repro=path(RING.repro_record),
    log:
        DAG.log("reproduce", "repro"),
    conda:
        "../envs/ringflow.yaml"
    params:
        step=STEP,
        ring=RING.root,
    shell:
        "{params.step} repro {params.ring:q} --out {output.repro:q} > {log:q} 2>&1"
