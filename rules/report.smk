# Report: a one-screen text summary and a self-contained HTML page of the ring.


rule summary:
    input:
        decision=ancient(path(RING.decision)),
        repro=ancient(path(RING.repro_record)),
    output:
        summary=path(RING.summary),
    log:
        DAG.log("summary", "summary"),
    conda:
        "../envs/ringflow.yaml"
    params:
        step=STEP,
        ring=RING.root,
    shell:
        "{params.step} summary {params.ring} --out {output.summary} > {log} 2>&1"


rule report:
    input:
        decision=ancient(path(RING.decision)),
        repro=ancient(path(RING.repro_record)),
    output:
        report=path(RING.report),
    log:
        DAG.log("report", "report"),
    conda:
        "../envs/ringflow.yaml"
    params:
        step=STEP,
        ring=RING.root,
    shell:
        "{params.step} report {params.ring} --out {output.report} > {log} 2>&1"
