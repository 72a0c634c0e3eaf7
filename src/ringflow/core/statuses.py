"""The one vocabulary of statuses and weights modes (docs/ring-folder.md#executions) used by every
module. Each is a `StrEnum`: its members are the very strings the ring's files hold, so a
record reads and writes the same text and compares equal to it; the names below are the
members under the short names every module uses."""

from enum import StrEnum


class ExecutionStatus(StrEnum):
    """How one execution ended (`runs/…/result.json`)."""

    OK = "ok"
    CRASH = "crash"
    HUNG = "hung"
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"
    CARRIED_OVER = "carried_over"
    SKIPPED = "skipped"  # not run: e.g. its weights key failed to train (reason key_failed)


class WeightsMode(StrEnum):
    """What an execution did with its weights key."""

    TRAIN = "train"
    REPLAY = "replay"
    FRESH = "fresh"
    NONE = "none"


class NodeStatus(StrEnum):
    """A node's own status (nodes/<id>/node.json): engineering while a session writes it,
    then ready (it may run) or rejected (it never will); imported from an earlier ring it
    is history when its scores cannot be compared with this ring's, and a node sealed for
    a later ring is carried over."""

    ENGINEERING = "engineering"
    READY = "ready"
    REJECTED = "rejected"
    HISTORY = "history"
    CARRIED_OVER = "carried_over"


OK, CRASH, HUNG, TIMEOUT, INTERRUPTED, CARRIED_OVER, SKIPPED = ExecutionStatus
EXECUTION_STATUSES = tuple(ExecutionStatus)

TRAIN, REPLAY, FRESH, NONE = WeightsMode
WEIGHTS_MODES = tuple(WeightsMode)

ENGINEERING, READY, REJECTED, HISTORY, _ = NodeStatus  # CARRIED_OVER: the same text as above
