# Execute: one run of a node's program on a view under a seed and variant, inside the
# sandbox and under the health supervisor, then scored by the isolated evaluator (the
# task's validator and scorer, outside the sandbox, once the program's tree is gone).
# One job does both: a second job per execution doubled what the scheduler had to carry.
# A failing candidate is a recorded status in result.json, never a failed job. Each
# weights key gets a target made by its trainer.


rule execute:
    input:
        unpack(DAG.execution_inputs),
    output:
        result=path(RING.result("{node}", "{view}", "{variant}")),
        score=path(RING.score("{node}", "{view}", "{variant}")),
    log:
        DAG.log("execute", "{node}.{view}.{variant}"),
    priority: DAG.execution_priority
    conda:
        "../envs/ringflow.yaml"
    threads: DAG.execution_threads
    resources:
        mem_mb=DAG.execution_mem_mb,
        runtime=DAG.execution_runtime,
        # On SLURM (docs/slurm.md#per-rule-resources): GPUs where the profile declares
        # them, the job's priority as a nice value, and no requeue.
        gpu=lambda wc: execution_gpus(
            workflow, config["gpus_per_execution"], DAG.execution_gpus(wc)
        ),
        slurm_extra=lambda wc: slurm_job_options(DAG.execution_priority(wc)),
    params:
        step=STEP,
        ring=RING.root,
    shell:
        "{params.step} execute {params.ring:q} {wildcards.node:q} {wildcards.view:q} {wildcards.variant:q}"
        " --gpus {resources.gpu} --result {output.result:q} --score {output.score:q} > {log:q} 2>&1"


rule weights_key:
    input:
        unpack(DAG.key_target_inputs),
    output:
        target=path(RING.key_target("{key}")),
    log:
        DAG.log("weights_key", "{key}"),
    # A key target takes no time and unblocks its replays: before any execution, so that
    # the executions' own priorities (resumed work first) decide what runs.
    priority: 2000
    conda:
        "../envs/ringflow.yaml"
    params:
        step=STEP,
        ring=RING.root,
    shell:
        "{params.step} key-target {params.ring:q} {wildcards.key:q} --out {output.target:q} > {log:q} 2>&1"
