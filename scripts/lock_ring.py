"""Lock the ring: RING.json, the view manifests and the live cutoff (SPEC 9, 13)."""

from ringflow.ring.lock import lock_ring

# The snakemake object is injected by Snakemake's script directive.
with open(snakemake.log[0], "w") as log:  # noqa: F821
    ring = lock_ring(dict(snakemake.config))  # noqa: F821
    print(f"ring {ring['ring_id']} locked at {ring['ring_dir']}", file=log)
