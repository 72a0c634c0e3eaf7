"""Lock the ring: RING.json, the view manifests and the live cutoff
(docs/ring-folder.md#the-lock-and-the-clock)."""

import sys
from pathlib import Path

from ringflow.config import config_defaults
from ringflow.core.errors import RingflowError
from ringflow.ring.chain import inherit_config
from ringflow.ring.lock import lock_ring

DEFAULTS = Path(__file__).resolve().parent.parent / "config" / "config.yaml"

# The snakemake object is injected by Snakemake's script directive.
with open(snakemake.log[0], "w") as log:  # noqa: F821
    try:
        # The ring's own configuration (its module's). A ring of a chain read before its
        # parent was locked takes the parent's configuration now; inheriting is idempotent.
        config = dict(snakemake.params.config)  # noqa: F821
        inherit_config(config, config_defaults(str(DEFAULTS)))
        ring = lock_ring(config)
    except RingflowError as exc:
        # A refusal (no sandbox, an interpreter that does not run, a bad task) says why.
        for stream in (log, sys.stderr):
            print(f"ringflow: {exc}", file=stream)
        sys.exit(1)
    print(f"ring {ring.ring_id} locked at {ring.ring_dir}", file=log)
