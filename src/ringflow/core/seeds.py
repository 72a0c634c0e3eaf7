"""Guard seeds and exposed seeds (docs/operations.md#final-selection).

Each ring's fresh guard seeds never overlap those of any other ring that shares its
store: siblings continued from one ring and new chains on the same data included. The
store holds a seed registry (`guard_seeds.json`, written under its own file lock); the
planner also walks `continue_from` back to the first ring, so a chain whose store was
replaced still skips what its rings exposed. Seeds 0, 1 and 2 are the promotion seeds
and are never guard seeds.
"""

from __future__ import annotations

import time
from pathlib import Path

from filelock import FileLock

from .errors import InputError
from .jsonio import atomic_write_json, read_json, sha256_json
from .state import Ring

REGISTRY_FILE = "guard_seeds.json"

RING_FILE = "RING.json"
FIRST_GUARD_SEED = 3  # 0 is authoritative, 1 and 2 are promotion seeds
# The baseline's probe runs for the guard's power (docs/guard.md#power): far above any guard
# seed a ring is given (the smallest integers >= 3 no ring of the store exposed), so a probe
# exposes none of them.
PROBE_SEEDS = (900_001, 900_002)


def _seed_list(record: dict, key: str, path: Path) -> list[int]:
    if key not in record:
        raise InputError(f"{path}: missing {key!r} (a list of seeds)")
    value = record[key]
    if not isinstance(value, list) or not all(
        isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0 for seed in value
    ):
        raise InputError(f"{path}: {key!r} must be a list of non-negative integers, got {value!r}")
    return value


def _read_ring(ring_dir: Path, reached_from: Path | None) -> dict:
    path = ring_dir / RING_FILE
    what = (
        f"previous ring's lock file {path}"
        if reached_from is None
        else f"lock file {path} (continue_from of {reached_from})"
    )
    record = read_json(path, what)
    if not isinstance(record, dict):
        raise InputError(f"{path}: a ring lock file must hold a JSON object")
    _seed_list(record, "guard_seeds", path)
    _seed_list(record, "chain_exposed_seeds", path)
    previous = record.get("continue_from")
    if previous is not None and (not isinstance(previous, str) or not previous):
        raise InputError(
            f"{path}: 'continue_from' must be a folder path (relative to {ring_dir}) or null, "
            f"got {previous!r}"
        )
    return record


def chain_rings(previous_ring_dir: Path | None) -> list[Ring]:
    """The locks of the chain, from the previous ring back to the first.

    Each entry is that ring's RING.json as a Ring whose ring_dir is its resolved folder.
    `continue_from` is resolved relative to the ring folder that names it. A
    missing or malformed lock file, or a cycle, raises InputError naming the file.
    """
    if previous_ring_dir is None:
        return []
    rings: list[Ring] = []
    seen: dict[Path, int] = {}
    ring_dir = Path(previous_ring_dir).resolve()
    reached_from: Path | None = None
    while True:
        if ring_dir in seen:
            loop = [str(r.ring_dir) for r in rings[seen[ring_dir] :]] + [str(ring_dir)]
            raise InputError(f"continue_from forms a cycle: {' -> '.join(loop)}")
        record = _read_ring(ring_dir, reached_from)
        seen[ring_dir] = len(rings)
        rings.append(
            Ring.from_record({**record, "ring_dir": str(ring_dir)}, source=ring_dir / RING_FILE)
        )
        previous = record.get("continue_from")
        if previous is None:
            return rings
        reached_from = ring_dir / RING_FILE
        ring_dir = (ring_dir / previous).resolve()


def pick_guard_seeds(exposed: set[int], n: int) -> list[int]:
    """The smallest n integers >= 3 that no earlier ring exposed."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"number of guard seeds must be a non-negative integer, got {n!r}")
    seeds: list[int] = []
    candidate = FIRST_GUARD_SEED
    while len(seeds) < n:
        if candidate not in exposed:
            seeds.append(candidate)
        candidate += 1
    return seeds


def chain_exposed(previous_ring_dir: Path | None) -> set[int]:
    exposed: set[int] = set()
    for ring in chain_rings(previous_ring_dir):
        exposed.update(ring.guard_seeds)
        exposed.update(ring.chain_exposed_seeds)
    return exposed


def plan_seeds(previous_ring_dir: Path | None, n: int) -> dict:
    """This ring's guard seeds and the chain-exposed set, from its chain alone."""
    exposed = chain_exposed(previous_ring_dir)
    guard_seeds = pick_guard_seeds(exposed, n)
    return {
        "guard_seeds": guard_seeds,
        "chain_exposed_seeds": sorted(exposed | set(guard_seeds)),
    }


def seeds_digest(guard_seeds: list[int], exposed: list[int]) -> str:
    """What the ledger's lock entry records, so an edited lock file no longer matches."""
    return sha256_json({"guard_seeds": guard_seeds, "chain_exposed_seeds": exposed})


class SeedRegistry:
    """Every guard seed handed out to a ring of one store: `<store>/guard_seeds.json`.

    {"rings": [{"ring_dir", "ring_id", "guard_seeds", "at"}, ...]}. Entries are only ever
    added, under the registry's file lock, and the file is replaced atomically.
    """

    def __init__(self, store: str | Path):
        self.path = Path(store) / REGISTRY_FILE
        self._lock = FileLock(str(self.path) + ".lock")

    def _read(self) -> dict:
        if not self.path.exists():
            return {"rings": []}
        data = read_json(self.path, f"seed registry {self.path}")
        rings = data.get("rings") if isinstance(data, dict) else None
        if not isinstance(rings, list) or not all(
            isinstance(r, dict) and isinstance(r.get("guard_seeds"), list) for r in rings
        ):
            raise InputError(
                f"seed registry {self.path} is malformed: expected "
                '{"rings": [{"ring_dir": ..., "guard_seeds": [...]}, ...]}'
            )
        return data

    def exposed(self) -> set[int]:
        return {seed for entry in self._read()["rings"] for seed in entry["guard_seeds"]}

    def allocate(self, ring_dir: Path, ring_id: str, previous: Path | None, n: int) -> dict:
        """This ring's guard seeds: the smallest n >= 3 that no ring of the store or of the
        chain exposed; registered before they are returned. A ring that allocated before
        (a lock interrupted before RING.json was written) gets its own seeds back."""
        ring_dir = str(Path(ring_dir).resolve())
        chain = chain_exposed(previous)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            data = self._read()
            mine = next((r for r in data["rings"] if r.get("ring_dir") == ring_dir), None)
            if mine is not None and len(mine["guard_seeds"]) == n:
                guard_seeds = list(mine["guard_seeds"])
            else:
                store_seeds = {s for r in data["rings"] for s in r["guard_seeds"]}
                guard_seeds = pick_guard_seeds(chain | store_seeds, n)
                data["rings"].append(
                    {
                        "ring_dir": ring_dir,
                        "ring_id": ring_id,
                        "guard_seeds": guard_seeds,
                        "at": time.time(),
                    }
                )
                atomic_write_json(self.path, data)
            exposed = {s for r in data["rings"] for s in r["guard_seeds"]} | chain
        return {"guard_seeds": guard_seeds, "chain_exposed_seeds": sorted(exposed)}
