# Report: a one-screen text summary and a self-contained HTML page of the ring.


rule summary:
    input:
        unpack(DAG.once_made(decision="decision", repro="repro_record")),
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
        "{params.step} summary {params.ring:q} --out {output.summary:q} > {log:q} 2>&1"


# A ring that continues another also gets its chain page, chain.html, from this step: a
# private record (ringflow.workflow.records), so that a finished ring never runs again for it.
rule report:
    input:
        unpack(DAG.once_made(decision="decision", repro="repro_record")),
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
        "{params.step} report {params.ring:q} --out {output.report:q} > {log:q} 2>&1"
