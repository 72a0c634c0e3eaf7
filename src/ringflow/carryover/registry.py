"""Which carried work has been resumed, and by which ring (docs/operations.md#carryover), kept in
the store.

Work is identified by the `ring#node` of whoever sealed it (and that ring's lock hash, so
two chains that share a store and a ring name stay apart). A claim is taken under the
store's file lock: of two sibling rings continuing the same ring, only the first to import
resumes a piece of work; the other sees it claimed. A ring that imports again (after a
crash) keeps its own claims.
"""

from __future__ import annotations

import time
from pathlib import Path

from filelock import FileLock

from ..core.jsonio import atomic_write_json, read_json
from ..core.state import Ring

REGISTRY = "carryover/resumed.json"
LOCK = "locks/carryover-resumed.lock"


def work_key(identity: str, lock_sha256: str) -> str:
    return f"{identity} {lock_sha256}"


class ResumeRegistry:
    def __init__(self, store_root: str | Path):
        self.root = Path(store_root)
        self.path = self.root / REGISTRY
        (self.root / "locks").mkdir(parents=True, exist_ok=True)
        self._lock = FileLock(str(self.root / LOCK))

    def _read(self) -> dict:
        return read_json(self.path) if self.path.is_file() else {}

    def claimed_by(self, identity: str, lock_sha256: str) -> dict | None:
        with self._lock:
            return self._read().get(work_key(identity, lock_sha256))

    def claim(self, identity: str, lock_sha256: str, ring: Ring) -> dict:
        """Claim the work for `ring`; returns the claim that holds (ours, or an earlier one)."""
        key = work_key(identity, lock_sha256)
        with self._lock:
            claims = self._read()
            held = claims.get(key)
            if held is not None:
                return held
            claim = {"identity": identity, "ring_id": ring.ring_id,
                     "ring_dir": ring.ring_dir, "at": time.time()}  # fmt: skip
            claims[key] = claim
            atomic_write_json(self.path, claims)
            return claim


def is_ours(claim: dict | None, ring: Ring) -> bool:
    return claim is not None and claim.get("ring_dir") == ring.ring_dir
