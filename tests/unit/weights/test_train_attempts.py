"""A weights key's training attempts: only the trainer's own failures spend one
(docs/contracts.md#weights)."""

from __future__ import annotations

import pytest

from ringflow.weights.attempts import KeyFailed, TrainAttempts

KEY = "k" * 64


def attempt(ring, execution: str, outcome: str | None) -> None:
    """One attempt of `execution`; None: its supervisor was lost before it ended."""
    tried = TrainAttempts(ring, KEY, execution, limit=2)
    tried.started()
    if outcome is not None:
        tried.ended(outcome)


def test_a_killed_ring_or_a_stopped_training_spends_no_attempt(tmp_path):
    # A ring killed twice while the same key trained (the test of a ring killed at every
    # stage once lost its best finalist this way), then stopped by a signal: the key is
    # still the trainer's to train.
    attempt(tmp_path, "n002-good/guard/g3", None)
    attempt(tmp_path, "n002-good/guard/g3", None)
    attempt(tmp_path, "n002-good/guard/g3", "interrupted")
    next_one = TrainAttempts(tmp_path, KEY, "n002-good/guard/g3", limit=2)
    assert next_one.failed() == []
    next_one.check()


def test_the_trainers_own_failures_spend_the_attempts(tmp_path):
    attempt(tmp_path, "n001-a/proxy/s0", "crash")
    attempt(tmp_path, "n001-a/proxy/s1", None)  # lost, not counted
    attempt(tmp_path, "n001-a/x3/s0", "hung")
    attempt(tmp_path, "n001-a/x3/s1", "registered")
    later = TrainAttempts(tmp_path, KEY, "n001-a/guard/g3", limit=2)
    assert later.failed() == [
        {"execution": "n001-a/proxy/s0", "outcome": "crash"},
        {"execution": "n001-a/x3/s0", "outcome": "hung"},
    ]
    with pytest.raises(KeyFailed, match=r"failed 2 time\(s\).*proxy/s0: crash; n001-a/x3/s0: hung"):
        later.check()
