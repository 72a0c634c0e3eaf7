"""Replay cost: a stat-checked hardlink from the store against copying the weights file.

A weights file is registered in a store on the same filesystem; `replay_into`
(the stat replay check plus a hardlink) is timed against `shutil.copyfile`
of the same file, with a warm page cache. Target: replay < 1% of the copy.

Two ways to catch a flipped bit whose size, mtime and inode were restored are measured
against the same copy baseline (docs/integrity.md#replays): the stat check with the
object's ctime (kept current by ringflow's own links, so it costs a stat and a small
write), which is `replay_verify: stat`; and hashing the object on every replay
(`replay_verify: full`, what every guard replay does). Each replay here is followed by
the release of its links, as after an execution, so the next replay finds the ctime that
release recorded. A flipped bit is then checked to be refused by the stat check.

    python bench/bench_replay.py [--size-gb 2] [--repeats 5]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from ringflow.core.errors import ReplayCheckFailed
from ringflow.weights.store import WeightsStore

RESULTS = Path(__file__).resolve().parent / "results" / "bench_replay.json"
BLOCK = 16 << 20
TARGET_RATIO = 0.01
TREE = hashlib.sha256(b"bench tree").hexdigest()
KEY = hashlib.sha256(b"bench key").hexdigest()
WEIGHTS = "weights/model.pt"


def write_weights(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    block = os.urandom(BLOCK)
    with open(path, "wb") as handle:
        left = size
        while left > 0:
            handle.write(block[: min(left, BLOCK)])
            left -= BLOCK


def best_of(repeats: int, function, *args, minus: list[float] | None = None) -> float:
    """The best time of `function`, less what it appended to `minus` meanwhile."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function(*args)
        times.append(time.perf_counter() - start - (minus[-1] if minus else 0.0))
    return min(times)


def flipped_bit_is_refused(store: WeightsStore, entry: dict, obj: Path, work: Path) -> bool:
    """Flip one bit of the object and restore its size, mtime and inode: the stat check
    must refuse to replay it."""
    before = obj.stat()
    os.chmod(obj, 0o644)
    with open(obj, "r+b") as handle:
        byte = handle.read(1)
        handle.seek(0)
        handle.write(bytes([byte[0] ^ 1]))
    os.chmod(obj, 0o444)
    os.utime(obj, ns=(before.st_atime_ns, before.st_mtime_ns))
    try:
        store.replay_into(entry, work / "replay-flipped")
    except ReplayCheckFailed:
        return True
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gb", type=float, default=2.0, help="size of the weights file")
    parser.add_argument("--repeats", type=int, default=5, help="repeats of the replay")
    parser.add_argument("--copy-repeats", type=int, default=2, help="repeats of the copy")
    parser.add_argument("--workdir", default=None, help="where to create store and folders")
    args = parser.parse_args()

    size = int(args.size_gb * (1 << 30))
    work = Path(tempfile.mkdtemp(prefix="bench-replay-", dir=args.workdir))
    try:
        trainer = work / "trainer"
        write_weights(trainer / WEIGHTS, size)
        store = WeightsStore(work / "store")
        start = time.perf_counter()
        entry, _ = store.register(
            TREE,
            KEY,
            trainer,
            [WEIGHTS],
            {"ring": "bench", "node": "n1", "execution": "train"},
            size,
        )
        register_s = time.perf_counter() - start
        obj = store.objects / entry["files"][0]["sha256"]

        counter = iter(range(10**6))

        released: list[float] = []

        def replay(verify: str = "stat") -> str:
            dest = work / f"replay-{next(counter)}"
            how = store.replay_into(entry, dest, verify)
            start = time.perf_counter()
            store.release_links(dest)  # as after an execution; timed on its own
            released.append(time.perf_counter() - start)
            return how

        def copy() -> None:
            dest = work / f"copy-{next(counter)}" / WEIGHTS
            dest.parent.mkdir(parents=True)
            shutil.copyfile(obj, dest)
            dest.unlink()  # keep the disk footprint to one copy at a time

        assert replay() == "hardlink"
        replay_s = best_of(args.repeats, replay, minus=released)
        copy_s = best_of(args.copy_repeats, copy)
        full_s = best_of(1, replay, "full", minus=released)
        release_s = min(released)
        caught = flipped_bit_is_refused(store, entry, obj, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    ratio = replay_s / copy_s
    full_ratio = full_s / copy_s
    result = {
        "size_bytes": size,
        "register_s": round(register_s, 3),
        "replay_stat_ctime_hardlink_ms": round(replay_s * 1000, 3),
        "copyfile_ms": round(copy_s * 1000, 1),
        "replay_over_copy": round(ratio, 5),
        "target_replay_over_copy": TARGET_RATIO,
        "replay_full_verify_ms": round(full_s * 1000, 1),
        "replay_full_over_copy": round(full_ratio, 3),
        "release_links_ms": round(release_s * 1000, 3),
        "stat_check_refuses_flipped_bit": caught,
        "meets_target": ratio < TARGET_RATIO and caught,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")

    print(f"replay of a {size / 2**30:.2f} GiB weights file, store on the same filesystem")
    print(f"{'measure':<42}{'value':>12}  target")
    rows = [
        ("register (copy + hash into store) (ms)", f"{register_s * 1000:.0f}", ""),
        ("shutil.copyfile (ms)", f"{copy_s * 1000:.0f}", ""),
        ("replay_into, stat+ctime check + hardlink (ms)", f"{replay_s * 1000:.3f}", ""),
        ("    ratio replay/copy", f"{ratio:.5f}", f"< {TARGET_RATIO}"),
        ("replay_into, verify=full (ms)", f"{full_s * 1000:.0f}", "(for reference)"),
        ("    ratio full replay/copy", f"{full_ratio:.3f}", ""),
        ("release_links after a replay (ms)", f"{release_s * 1000:.3f}", ""),
        ("flipped bit, stat kept: refused", "yes" if caught else "NO", "yes"),
    ]
    for name, value, target in rows:
        print(f"{name:<42}{value:>12}  {target}")
    print(f"results: {RESULTS}")


if __name__ == "__main__":
    main()
