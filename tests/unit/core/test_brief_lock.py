"""The locks around records held for milliseconds wait for each other in milliseconds."""

from __future__ import annotations

import threading
import time

import pytest
from filelock import Timeout

from ringflow.core.anchors import StoreAnchors
from ringflow.core.brief_lock import BRIEF_POLL_S, brief_lock
from ringflow.core.ledger import Ledger


def test_a_brief_lock_is_a_real_file_lock_that_waiters_try_every_few_milliseconds(tmp_path):
    path = tmp_path / "records.lock"
    waiter = brief_lock(path)
    assert waiter.poll_interval == BRIEF_POLL_S < 0.01  # filelock's own default is 50 ms
    held, released = threading.Event(), threading.Event()

    def hold_for_a_while() -> None:
        with brief_lock(path):
            held.set()
            time.sleep(0.3)
            released.set()

    holder = threading.Thread(target=hold_for_a_while)
    holder.start()
    assert held.wait(10)
    with pytest.raises(Timeout):
        waiter.acquire(timeout=0.05)
    with waiter:  # waits for the holder's release, then holds it
        assert released.is_set()
    holder.join()


def test_the_ledger_and_the_store_anchors_wait_briefly_for_their_locks(tmp_path):
    # Every execution appends to both twice, two executions at a time: a waiter must not
    # sleep 50 ms behind an append of a few.
    assert Ledger(tmp_path / "ledger.jsonl")._lock.poll_interval == BRIEF_POLL_S
    assert StoreAnchors(tmp_path / "store")._lock.poll_interval == BRIEF_POLL_S
