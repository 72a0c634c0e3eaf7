# ringflow: one time-boxed ring of an ML search (see README.md and SPEC).
# The Snakefile is a table of contents; each stage lives in its own rule file.

from snakemake.utils import min_version

min_version("9.0")


configfile: workflow.source_path("config/config.yaml")


include: "rules/common.smk"
include: "rules/import.smk"
include: "rules/carryover.smk"
include: "rules/execute.smk"
include: "rules/search.smk"
include: "rules/promote.smk"
include: "rules/final.smk"
include: "rules/report.smk"


onstart:
    start_timekeeper()
    start_ring_hooks()


onsuccess:
    finish_timekeeper()
    end_ring(log, completed=True)


onerror:
    finish_timekeeper()
    end_ring(log, completed=False)
    report_stop()


rule all:
    default_target: True
    input:
        ring_outputs,
