"""The built-in demo task: handwritten digits from scikit-learn's bundled `load_digits`.

Nothing is downloaded. `materialise_task` turns the bundled data into a task folder
(docs/contracts.md#task) with four views (search: proxy, x3; guard: guard; final: final), and
the package ships candidate solutions and a baseline (docs/contracts.md#candidate) that run against
it in a few seconds each on one thread.

How rows are split (1797 digits, each row has an opaque `id`, its position in a fixed
shuffle, so ids carry no hint of the label):

- every view has its own test rows; the test rows of all views are pairwise disjoint
  and no test row appears in the training rows of any view, so no view can leak the
  answers of another;
- `proxy` and `x3` train on disjoint parts of a shared training pool; `guard` and
  `final` train on the whole pool (more data, as a final fit would). `guard`'s test rows
  are scored only by the final guard, never by the search.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

from ..core.jsonio import atomic_write_bytes

PACKAGE_DIR = Path(__file__).resolve().parent
TASK_FILES_DIR = PACKAGE_DIR / "task_files"
TASK_FILES = ("task.yaml", "scorer.py", "validator.py")

VIEW_NAMES = ("proxy", "x3", "guard", "final")
# Test rows of each view, taken in this order from the front of the shuffle.
TEST_SIZES = {"proxy": 200, "x3": 250, "guard": 250, "final": 300}
# Training rows as a slice of the pool that follows the test rows (None = to the end).
TRAIN_SLICES = {"proxy": (0, 400), "x3": (400, None), "guard": (0, None), "final": (0, None)}
# A fixed text, not a numpy seed: the shuffle must not depend on numpy's stream,
# because view content hashes (and so weights keys) must stay stable across installs.
SHUFFLE_SALT = "ringflow-digits-demo-v1"
N_PIXELS = 64


def candidates_dir() -> Path:
    """Folder that holds one demo solution folder per candidate (`mlp`, `forest`, ...)."""
    return PACKAGE_DIR / "candidates"


def baseline_dir() -> Path:
    """The demo's baseline solution folder."""
    return PACKAGE_DIR / "baseline"


def materialise_task(dest: Path) -> Path:
    """Write the demo task folder at `dest` and return it.

    Idempotent: a file is written only when it is missing or its bytes differ, so a
    second call changes no mtime and hash memos over the views stay valid. The bytes
    are the same on every call and every machine with the same scikit-learn data.
    """
    dest = Path(dest)
    files: dict[Path, bytes] = {}
    for name in TASK_FILES:
        files[dest / name] = (TASK_FILES_DIR / name).read_bytes()
    for view, view_files in build_views().items():
        for rel, data in view_files.items():
            files[dest / "views" / view / rel] = data
    for path, data in files.items():
        _write_if_changed(path, data)
    return dest


def build_views() -> dict[str, dict[str, bytes]]:
    """The CSV bytes of every view: {view: {relative path: bytes}}."""
    pixels, labels = _load_digits()
    order = _fixed_shuffle(len(labels))
    test_rows: dict[str, list[int]] = {}
    start = 0
    for view in VIEW_NAMES:
        test_rows[view] = order[start : start + TEST_SIZES[view]]
        start += TEST_SIZES[view]
    pool = order[start:]
    # The id of a row is its position in the shuffle: stable, and unrelated to the label.
    id_of = {row: position for position, row in enumerate(order)}

    views: dict[str, dict[str, bytes]] = {}
    for view in VIEW_NAMES:
        lo, hi = TRAIN_SLICES[view]
        train = sorted(pool[lo:hi], key=id_of.__getitem__)
        test = sorted(test_rows[view], key=id_of.__getitem__)
        views[view] = {
            "inputs/train.csv": _csv(
                ["id", *_pixel_columns(), "label"],
                ([id_of[r], *pixels[r], labels[r]] for r in train),
            ),
            "inputs/test.csv": _csv(
                ["id", *_pixel_columns()], ([id_of[r], *pixels[r]] for r in test)
            ),
            "labels/test.csv": _csv(["id", "label"], ([id_of[r], labels[r]] for r in test)),
        }
    return views


def _load_digits() -> tuple[list[list[int]], list[int]]:
    # Imported here: scikit-learn is slow to import and only the demo needs it.
    from sklearn.datasets import load_digits

    digits = load_digits()
    # The pixels are grey levels 0..16 stored as floats; as integers their text form
    # is exact and identical everywhere.
    pixels = [[int(v) for v in row] for row in digits.data]
    return pixels, [int(v) for v in digits.target]


def _fixed_shuffle(n: int) -> list[int]:
    def rank(i: int) -> str:
        return hashlib.sha256(f"{SHUFFLE_SALT}:{i}".encode()).hexdigest()

    return sorted(range(n), key=rank)


def _pixel_columns() -> list[str]:
    return [f"p{i}" for i in range(N_PIXELS)]


def _csv(header: list[str], rows: Iterable[list[int]]) -> bytes:
    lines = [",".join(header)]
    lines.extend(",".join(str(v) for v in row) for row in rows)
    return ("\n".join(lines) + "\n").encode()


def _write_if_changed(path: Path, data: bytes) -> None:
    try:
        if path.read_bytes() == data:
            return
    except FileNotFoundError:
        pass
    atomic_write_bytes(path, data)
