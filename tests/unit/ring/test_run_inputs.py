"""Every run's fresh copy of its inputs (ring/run_inputs.py): made alike whichever source,
so a view-blind run's inputs cannot be told from a real run's by how they were made."""

from __future__ import annotations

import os
import stat

import pytest

from ringflow.core.disguise import _reorder_csv
from ringflow.core.errors import SandboxError
from ringflow.ring.run_inputs import fresh_inputs


def _tree(root, rows: bytes, mtime_ns: int):
    (root / "sub").mkdir(parents=True)
    (root / "b.csv").write_bytes(rows)
    (root / "a.txt").write_bytes(b"alpha\n")
    (root / "sub" / "c.bin").write_bytes(os.urandom(3000))
    for path in root.rglob("*"):
        if path.is_file():
            os.utime(path, ns=(mtime_ns, mtime_ns))
    return root


def test_a_copy_is_private_and_takes_the_real_views_times(tmp_path):
    rows = b"id,x\n1,a\n2,b\n3,c\n4,d"
    real = _tree(tmp_path / "real", rows, 1_600_000_000_123_456_789)
    disguised = _tree(tmp_path / "disguised", _reorder_csv(rows, 7), 1_700_000_000_000_000_000)
    os.link(real / "a.txt", tmp_path / "task-a.txt")  # the snapshot is a hard link
    copies = {name: fresh_inputs(src, tmp_path / f"run-{name}", real)
              for name, src in (("real", real), ("blind", disguised))}  # fmt: skip
    seen = {}
    for name, folder in copies.items():
        files = sorted(p for p in folder.rglob("*") if p.is_file())
        stats = {p.relative_to(folder).as_posix(): p.stat() for p in files}
        seen[name] = {
            "names": sorted(stats),
            "inode_order": sorted(stats, key=lambda n: stats[n].st_ino),
            "nlink": {n: s.st_nlink for n, s in stats.items()},
            "mode": {n: stat.S_IMODE(s.st_mode) for n, s in stats.items()},
            "size": {n: s.st_size for n, s in stats.items()},
            "mtime": {n: s.st_mtime_ns for n, s in stats.items()},
            "folders": sorted(
                stat.S_IMODE(p.stat().st_mode) for p in folder.rglob("*") if p.is_dir()
            ),
        }
    assert seen["real"] == seen["blind"]
    assert set(seen["real"]["nlink"].values()) == {1}
    assert set(seen["real"]["mode"].values()) == {0o444} and seen["real"]["folders"] == [0o755]
    assert set(seen["real"]["mtime"].values()) == {1_600_000_000_123_456_789}
    assert (copies["real"] / "sub" / "c.bin").read_bytes() == (real / "sub" / "c.bin").read_bytes()
    assert (copies["blind"] / "b.csv").read_bytes() != rows  # the disguised copy's own order


def test_reordering_keeps_every_byte(tmp_path):
    for rows in (b"h\n1\n2\n3\n4\n5", b"h\n1\n2\n3\n4\n5\n"):
        reordered = _reorder_csv(rows, 3)
        assert len(reordered) == len(rows) and sorted(reordered) == sorted(rows)
        assert reordered.endswith(b"\n") == rows.endswith(b"\n")


def test_a_source_that_is_not_data_is_the_machines_failure(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    os.mkfifo(source / "pipe")
    with pytest.raises(SandboxError, match="cannot copy the view's inputs"):
        fresh_inputs(source, tmp_path / "run", source)
