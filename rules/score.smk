# Score: the isolated evaluator validates the predictions, then scores them on the hidden
# labels with the scoring seed; an execution that failed is recorded as not scored.


rule score:
    input:
        result=path(RING.result("{node}", "{view}", "{variant}")),
    output:
        score=path(RING.score("{node}", "{view}", "{variant}")),
    log:
        log_for("score", "{node}.{view}.{variant}"),
    conda:
        "../envs/ringflow.yaml"
    params:
        ringflow=RINGFLOW,
        ring=RING.root,
    shell:
        "{params.ringflow} score {params.ring} {wildcards.node} {wildcards.view} {wildcards.variant}"
        " > {log} 2>&1"
