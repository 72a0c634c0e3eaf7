"""Lock the ring: RING.json, the view manifests and the live cutoff (SPEC 9, 13)."""

import sys

from ringflow.errors import RingflowError
from ringflow.ring.lock import lock_ring

# The snakemake object is injected by Snakemake's script directive.
with open(snakemake.log[0], "w") as log:  # noqa: F821
    try:
        ring = lock_ring(dict(snakemake.config))  # noqa: F821
    except RingflowError as exc:
        # A refusal (no sandbox, an interpreter that does not run, a bad task) says why.
        for stream in (log, sys.stderr):
            print(f"ringflow: {exc}", file=stream)
        sys.exit(1)
    print(f"ring {ring['ring_id']} locked at {ring['ring_dir']}", file=log)
