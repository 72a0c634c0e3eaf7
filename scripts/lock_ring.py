"""Lock the ring: RING.json, the view manifests and the live cutoff (SPEC 9, 13)."""

import sys

from ringflow.ring import lock_ring

sys.stderr = open(snakemake.log[0], "w")  # noqa: F821 (the snakemake object is injected)
ring = lock_ring(dict(snakemake.config))  # noqa: F821
print(f"ring {ring['ring_id']} locked at {ring['ring_dir']}", file=sys.stderr)
