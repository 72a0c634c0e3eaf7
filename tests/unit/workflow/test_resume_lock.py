"""A run Snakemake will refuse for another driver's lock leaves the ring's records as they
are (workflow/resume.py): read from Snakemake's own persistence."""

from __future__ import annotations

import pytest
from snakemake.persistence.file import FilePersistence

from ringflow.workflow.resume import locked_by_another_driver, names_the_ring


@pytest.fixture
def persistence(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # Snakemake's working folder: locked paths are relative
    return FilePersistence(path=tmp_path / ".snakemake")


def test_a_locked_path_in_the_ring_names_it_and_a_sibling_ring_does_not(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ring = tmp_path / "runs" / "r1"
    assert names_the_ring(ring, ["runs/r1/nodes/n001-a/exec/proxy/s0/result.json"])
    assert names_the_ring(ring, [str(ring / "selection" / "search.json")])
    assert names_the_ring(ring, ["runs/r1"])
    assert not names_the_ring(ring, ["runs/r10/selection/search.json", "runs/r1.txt"])


def test_a_killed_drivers_lock_on_the_ring_is_seen_before_snakemake_refuses(tmp_path, persistence):
    ring = tmp_path / "runs" / "r1"
    assert not locked_by_another_driver(ring, persistence, locking=True)
    # What a driver killed with -9 leaves: its lock files (Snakemake's own writer).
    persistence._write_locks("input", ["task/views/proxy/inputs/data.txt"])
    persistence._write_locks("output", ["runs/r1/nodes/n001-a/exec/proxy/s0/result.json"])
    assert locked_by_another_driver(ring, persistence, locking=True)
    assert not locked_by_another_driver(tmp_path / "runs" / "r2", persistence, locking=True)
    # --nolock: Snakemake does not refuse, so the records are set aside as usual.
    assert not locked_by_another_driver(ring, persistence, locking=False)
    persistence.unlock()  # what `snakemake --unlock` does
    assert not locked_by_another_driver(ring, persistence, locking=True)
