# One ring: its configuration, paths and input functions, then each stage in its own rule
# file. The Snakefile instantiates it once per ring (a Snakemake module), with the ring's
# configuration.


include: "common.smk"
include: "import.smk"
include: "carryover.smk"
include: "execute.smk"
include: "search.smk"
include: "promote.smk"
include: "final.smk"
include: "report.smk"
