"""Ancestor integrity, recursive (docs/operations.md#chains): a ring refuses to continue a chain in
which any ring is missing, has lost its lock, is tainted, or has a ledger that does not verify."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from ringflow.core.errors import InputError
from ringflow.ring.ancestry import taint
from ringflow.ring.lock import lock_ring
from ringflow.verify import verify_ring
from ringtools import full_config, make_candidate, make_task


@pytest.fixture
def chain(tmp_path):
    """Rings a <- b, locked over the scripted task; a continuation of b is `third`."""
    make_candidate(tmp_path / "cands" / "one", mean=0.5)
    first = full_config(ring_id="a", task=str(make_task(tmp_path)),
                        candidates=str(tmp_path / "cands"), baseline=None)  # fmt: skip
    lock_ring(first, tmp_path)
    lock_ring({**first, "ring_id": "b", "continue_from": "runs/a"}, tmp_path)
    return tmp_path, {**first, "ring_id": "c", "continue_from": "runs/b"}


def test_a_tainted_grandparent_refuses_the_continuation(chain):
    work, third = chain
    run = subprocess.run(
        [sys.executable, "-m", "ringflow", "taint", str(work / "runs" / "a"),
         "--why", "its scorer leaked labels"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert json.loads((work / "runs" / "a" / "TAINTED").read_text())["why"] == (
        "its scorer leaked labels"
    )
    with pytest.raises(InputError, match=r"runs/a does not verify: it is marked tainted: its "
                       r"scorer leaked labels"):  # fmt: skip
        lock_ring(third, work)
    assert not (work / "runs" / "c" / "RING.json").exists()
    assert any("marked tainted" in p for p in verify_ring(work / "runs" / "b"))


def test_a_missing_grandparent_or_its_lock_refuses_the_continuation(chain):
    work, third = chain
    (work / "runs" / "a" / "RING.json").unlink()
    with pytest.raises(InputError, match=r"runs/a.*lock \(RING.json\) is missing"):
        lock_ring(third, work)
    shutil.rmtree(work / "runs" / "a")
    with pytest.raises(InputError, match=r"runs/a.*folder is missing"):
        lock_ring(third, work)


def test_a_grandparent_whose_ledger_lost_its_head_refuses(chain):
    work, third = chain
    ledger = work / "runs" / "a" / "ledger.jsonl"
    ledger.write_text("")  # cut short: ledger.head still anchors the lost line
    with pytest.raises(InputError, match=r"runs/a does not verify: .*cut short"):
        lock_ring(third, work)


def test_taint_says_why_once(chain):
    work, _ = chain
    with pytest.raises(InputError, match="say why"):
        taint(work / "runs" / "b", "  ")
    taint(work / "runs" / "b", "trained on the final view")
    with pytest.raises(InputError, match="already tainted: trained on the final view"):
        taint(work / "runs" / "b", "again")
    with pytest.raises(InputError, match="not a ring folder"):
        taint(work / "nowhere", "why")
