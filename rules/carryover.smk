# Carryover (docs/operations.md#carryover): a ring that continues a chain first verifies and imports
# the sealed work of its ancestors (the resume queue its import then turns into nodes) and its
# parent's scored work (comparable or re-executed); when the search has ended, the work the
# cutoff cut off is sealed; the stop manifest comes last.


checkpoint import_carryover:
    input:
        chain_parent_inputs("stop_manifest", "carryover_seals"),
        lock=ancient(path(RING.ring_json)),
    output:
        imported=path(RING.carryover_imported),
    log:
        log_for("import_carryover", "carryover"),
    conda:
        "../envs/ringflow.yaml"
    params:
        ringflow=RINGFLOW,
        ring=RING.root,
    shell:
        "{params.ringflow} import-carryover {params.ring} > {log} 2>&1"


# A plain rule: a checkpoint finishing here would make Snakemake re-read the other
# checkpoints' outputs while final selection may be rewriting them.
rule seal_carryover:
    input:
        search=path(RING.search),
    output:
        seals=path(RING.carryover_seals),
    log:
        log_for("seal_carryover", "seals"),
    conda:
        "../envs/ringflow.yaml"
    params:
        ringflow=RINGFLOW,
        ring=RING.root,
    shell:
        "{params.ringflow} seal {params.ring} > {log} 2>&1"


rule stop_manifest:
    input:
        decision=path(RING.decision),
        repro=path(RING.repro_record),
        summary=path(RING.summary),
        report=path(RING.report),
        seals=path(RING.carryover_seals),
    output:
        manifest=path(RING.stop_manifest),
    log:
        log_for("stop_manifest", "manifest"),
    conda:
        "../envs/ringflow.yaml"
    params:
        ringflow=RINGFLOW,
        ring=RING.root,
    shell:
        "{params.ringflow} stop-manifest {params.ring} > {log} 2>&1"
