"""The cluster a ring's executions run on: what SLURM's partitions offer, and whether an
execution's request fits a node (docs/slurm.md)."""
