# Report: a one-screen text summary and a self-contained HTML page of the ring.


rule summary:
    input:
        decision=path(RING.decision),
        repro=path(RING.repro_record),
    output:
        summary=path(RING.summary),
    log:
        log_for("summary", "summary"),
    conda:
        "../envs/ringflow.yaml"
    params:
        ringflow=RINGFLOW,
        ring=RING.root,
    shell:
        "{params.ringflow} summary {params.ring} --write {output.summary} > {log} 2>&1"


rule report:
    input:
        decision=path(RING.decision),
        repro=path(RING.repro_record),
    output:
        report=path(RING.report),
    log:
        log_for("report", "report"),
    conda:
        "../envs/ringflow.yaml"
    params:
        ringflow=RINGFLOW,
        ring=RING.root,
    shell:
        "{params.ringflow} report {params.ring} --out {output.report} > {log} 2>&1"
