# Carryover (docs/operations.md#carryover): a ring that continues a chain first verifies and imports
# the sealed work of its ancestors (the resume queue its import then turns into nodes) and its
# parent's scored work (comparable or re-executed); when the search has ended, the work the
# cutoff cut off is sealed; the stop manifest comes last.


checkpoint import_carryover:
    input:
        DAG.chain_parent_inputs("stop_manifest", "carryover_seals"),
        unpack(DAG.once_made(lock="ring_json")),
    output:
        imported=path(RING.carryover_imported),
    log:
        DAG.log("import_carryover", "carryover"),
    conda:
        "../envs/ringflow.yaml"
    params:
        step=STEP,
        ring=RING.root,
    shell:
        "{params.step} import-carryover {params.ring:q} --out {output.imported:q} > {log:q} 2>&1"


# A plain rule: a checkpoint finishing here would make Snakemake re-read the other
# checkpoints' outputs while final selection may be running.
rule seal_carryover:
    input:
        search=path(RING.search),
    output:
        seals=path(RING.carryover_seals),
    log:
        DAG.log("seal_carryover", "seals"),
    conda:
        "../envs/ringflow.yaml"
    params:
        step=STEP,
        ring=RING.root,
    shell:
        "{params.step} seal {params.ring:q} --out {output.seals:q} > {log:q} 2>&1"


# A user's own `ringflow report` or `summary` of a finished ring never makes it look out of
# date: each input is ancient once it exists.
rule stop_manifest:
    input:
        unpack(
            DAG.once_made(
                decision="decision",
                repro="repro_record",
                summary="summary",
                report="report",
            )
        ),
        seals=path(RING.carryover_seals),
        # Named here, where the DAG starts, and not first by the search: Snakemake re-reads
        # a job's inputs as each checkpoint it waits for completes, but a job first named
        # after a checkpoint it reads had completed (a ring resumed mid-loop, its generation
        # planned by the run before) keeps the inputs it was named with, and the loop would
        # end before its generation is settled.
        loop=path(RING.search_loop),
    output:
        manifest=path(RING.stop_manifest),
    log:
        DAG.log("stop_manifest", "manifest"),
    conda:
        "../envs/ringflow.yaml"
    params:
        step=STEP,
        ring=RING.root,
    shell:
        "{params.step} stop-manifest {params.ring:q} --out {output.manifest:q} > {log:q} 2>&1"
