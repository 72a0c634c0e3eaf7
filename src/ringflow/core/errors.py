"""Errors that ringflow reports to people: each says what is wrong and where."""


class RingflowError(Exception):
    """Base class: the message is shown to the user as it is."""


class InputError(RingflowError):
    """Bad user input (a task, a candidate, a configuration): nothing was changed."""


class CandidateError(InputError):
    """A candidate's `solution/` breaks the contract in docs/contracts.md#candidate."""


class StoreError(RingflowError):
    """The weights store refused an operation."""


class ReplayCheckFailed(StoreError):
    """A registered weights file is missing or no longer matches its hash."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"registered weights file {path!r} {reason}")
        self.path = path
        self.reason = reason


class DeadlineReached(RingflowError):
    """A wait gave up because the ring's (possibly moved) deadline passed."""


class AcceptanceError(StoreError):
    """Weights written by a training run break the declaration: missing, a link, or too large."""


class SandboxError(RingflowError):
    """The program cannot be run confined as required (docs/contracts.md#sandbox): says what and
    where."""


class MachineryError(RingflowError):
    """ringflow or the machine failed, not the candidate: the ring stops
    (docs/operations.md#recovery-after-a-stop).

    Such a failure is never recorded as a candidate's `crash`: the job fails loudly, the
    ring records why in STOPPED.json, and the workflow exits non-zero.
    """
