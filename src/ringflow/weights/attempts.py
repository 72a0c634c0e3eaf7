"""Training attempts of a weights key within a ring (docs/contracts.md#weights): a failed trainer is
retried by at most `max_train_attempts` executions; the others are skipped at once (`key_failed`).

Each attempt is two lines of `runs/<ring>/keys/attempts/<key>.jsonl`: "started" when an
execution begins to train (under the key lock) and "ended" with its outcome. Only the
trainer's own failures spend an attempt (a crash, a hang, a time limit, weights it did
not leave); what ringflow or the machine did to it never does:

- an attempt that never ended lost its supervisor: the ring was killed, the machine went
  down (the program cannot reach its supervisor from its sandbox);
- an attempt that ended `interrupted` was stopped by a signal, by losing its driver, or
  by the ring's clock;
- an attempt cut by the machine (a full disk) is withdrawn.

The resumed ring trains such a key again, as its first trainer would have
(docs/contracts.md#weights).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from ..core import statuses
from ..core.errors import RingflowError
from ..core.jsonio import append_jsonl, read_jsonl_objects

REGISTERED = "registered"
# Outcomes that are not the trainer's failure.
NOT_FAILED = frozenset({REGISTERED, statuses.INTERRUPTED})


class KeyFailed(RingflowError):
    """The key's training failed as often as allowed; this execution is skipped."""


class TrainAttempts:
    def __init__(self, ring_dir: str | Path, key: str, execution: str, limit: int):
        self.path = Path(ring_dir) / "keys" / "attempts" / f"{key}.jsonl"
        self.key = key
        self.execution = execution
        self.limit = limit

    def _lines(self) -> list[dict]:
        """Every whole line; a torn one (a killed writer) is left out."""
        return [line for line in read_jsonl_objects(self.path) if "attempt" in line]

    def failed(self) -> list[dict]:
        """The trainer's own failed attempts (each {"execution", "outcome"}). One still
        training has not ended: it is waited for on the key's lock."""
        lines = self._lines()
        ended = {line["attempt"]: line for line in lines if line.get("event") == "ended"}
        failed = []
        for line in lines:
            if line.get("event") != "started":
                continue
            end = ended.get(line["attempt"])
            if end is None or end.get("outcome") in NOT_FAILED:
                continue
            failed.append({"execution": line["execution"], "outcome": end["outcome"]})
        return failed

    def check(self) -> None:
        """Raise KeyFailed when the key failed `limit` times already."""
        failed = self.failed()
        if len(failed) >= self.limit:
            tried = "; ".join(f"{f['execution']}: {f['outcome']}" for f in failed)
            raise KeyFailed(
                f"key_failed: training of weights key {self.key} failed "
                f"{len(failed)} time(s), the most max_train_attempts allows ({tried})"
            )

    def started(self) -> str:
        attempt = f"{self.execution}@{time.time_ns()}"
        try:
            self._offset: int | None = self.path.stat().st_size
        except FileNotFoundError:
            self._offset = 0
        try:
            append_jsonl(self.path, {"event": "started", "attempt": attempt,
                                     "execution": self.execution, "ts": time.time()})  # fmt: skip
        except OSError:
            self.withdraw()  # a torn line (a full disk) must not glue onto the next one
            raise
        self._attempt = attempt
        return attempt

    def withdraw(self) -> bool:
        """Take back this execution's started attempt (the machine failed, not the
        trainer): the file is cut back to where it ended before. Truncating needs no room
        on a full disk; callers hold the key lock, so no other line follows ours."""
        offset = getattr(self, "_offset", None)
        if offset is None:
            return False
        self._offset = None
        try:
            fd = os.open(self.path, os.O_WRONLY)
        except FileNotFoundError:
            return False
        try:
            os.ftruncate(fd, offset)
            os.fsync(fd)
        finally:
            os.close(fd)
        return True

    def ended(self, outcome: str) -> None:
        append_jsonl(self.path, {"event": "ended", "attempt": self._attempt,
                                 "execution": self.execution, "outcome": outcome,
                                 "ts": time.time()})  # fmt: skip
