"""The one vocabulary of statuses and weights modes (docs/ring-folder.md#executions) used by every
module."""

OK = "ok"
CRASH = "crash"
HUNG = "hung"
TIMEOUT = "timeout"
INTERRUPTED = "interrupted"
CARRIED_OVER = "carried_over"
SKIPPED = "skipped"  # not run: e.g. its weights key failed to train (reason key_failed)

EXECUTION_STATUSES = (OK, CRASH, HUNG, TIMEOUT, INTERRUPTED, CARRIED_OVER, SKIPPED)

TRAIN = "train"
REPLAY = "replay"
FRESH = "fresh"
NONE = "none"

WEIGHTS_MODES = (TRAIN, REPLAY, FRESH, NONE)
