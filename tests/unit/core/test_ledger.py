"""The hash-chained ledger: it verifies, and edits, deletions and reorderings are caught."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ringflow.core.errors import InputError, RingflowError
from ringflow.core.layout import RingLayout
from ringflow.core.ledger import GENESIS, Ledger, emit_event, ledger_anchors, record_hash

SRC = Path(__file__).resolve().parents[3] / "src"


@pytest.fixture
def ledger(tmp_path) -> Ledger:
    book = Ledger(tmp_path / "ledger.jsonl")
    for index in range(5):
        book.append("register", key=f"k{index}", node=f"n{index}", files=[{"size": index}])
    return book


def lines_of(book: Ledger) -> list[str]:
    return book.path.read_text().splitlines(keepends=True)


def rewrite(book: Ledger, lines: list[str]) -> None:
    book.path.write_text("".join(lines))


def test_records_are_chained(ledger):
    records = [json.loads(line) for line in lines_of(ledger)]
    assert [r["seq"] for r in records] == [1, 2, 3, 4, 5]
    assert records[0]["prev"] == GENESIS
    for before, after in itertools.pairwise(records):
        assert after["prev"] == before["hash"]
    for record in records:
        assert record["hash"] == record_hash(record)
        assert record["kind"] == "register" and isinstance(record["ts"], float)
    assert records[2]["key"] == "k2" and records[2]["files"] == [{"size": 2}]
    assert ledger.verify() == []


def test_append_returns_the_record_written(ledger):
    record = ledger.append("seal", seal="abc")
    assert json.loads(lines_of(ledger)[-1]) == record
    assert record["seq"] == 6


def test_edited_field_is_detected(ledger):
    lines = lines_of(ledger)
    record = json.loads(lines[2])
    record["node"] = "n-forged"
    lines[2] = json.dumps(record, sort_keys=True) + "\n"
    rewrite(ledger, lines)
    problems = ledger.verify()
    assert problems == ["line 3: hash does not match the record (edited?)"]


def test_edit_that_recomputes_its_hash_breaks_the_next_link(ledger):
    lines = lines_of(ledger)
    record = json.loads(lines[1])
    record["key"] = "forged"
    record["hash"] = record_hash(record)
    lines[1] = json.dumps(record, sort_keys=True) + "\n"
    rewrite(ledger, lines)
    assert ledger.verify() == ["line 3: prev does not link to the hash of the line before"]


def test_deleted_line_is_detected(ledger):
    lines = lines_of(ledger)
    del lines[1]
    rewrite(ledger, lines)
    problems = ledger.verify()
    assert any(p.startswith("line 2: seq") for p in problems)
    assert any(p.startswith("line 2: prev") for p in problems)


def test_reordered_lines_are_detected(ledger):
    lines = lines_of(ledger)
    lines[1], lines[2] = lines[2], lines[1]
    rewrite(ledger, lines)
    problems = ledger.verify()
    assert {p.split(":")[0] for p in problems} >= {"line 2", "line 3"}


def test_garbage_and_torn_lines_are_reported(ledger):
    lines = lines_of(ledger)
    lines[3] = "not json\n"
    rewrite(ledger, lines)
    assert any(p.startswith("line 4: not valid JSON") for p in ledger.verify())
    with open(ledger.path, "a") as handle:
        handle.write('{"seq": 6')
    assert any("line 6: incomplete" in p for p in ledger.verify())
    with pytest.raises(RingflowError, match="incomplete"):
        ledger.append("next")


def test_missing_ledger_is_a_problem(tmp_path):
    assert Ledger(tmp_path / "none.jsonl").verify() == [
        f"ledger {tmp_path / 'none.jsonl'}: file not found"
    ]


def test_reserved_fields_are_refused(tmp_path):
    with pytest.raises(InputError, match="reserved"):
        Ledger(tmp_path / "l.jsonl").append("x", hash="forged")


def test_long_records_chain_through_the_tail_reader(tmp_path):
    book = Ledger(tmp_path / "ledger.jsonl")
    book.append("big", blob="x" * 20000)
    book.append("big", blob="y" * 30000)
    book.append("small")
    assert book.verify() == []


def test_concurrent_appenders_keep_one_chain(tmp_path):
    path = tmp_path / "ledger.jsonl"
    script = textwrap.dedent(
        """
        import sys
        from ringflow.core.ledger import Ledger
        book = Ledger(sys.argv[1])
        for i in range(40):
            book.append("tick", writer=sys.argv[2], i=i)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    writers = [
        subprocess.Popen([sys.executable, "-c", script, str(path), name], env=env)
        for name in ("a", "b", "c")
    ]
    assert [w.wait(timeout=60) for w in writers] == [0, 0, 0]
    book = Ledger(path)
    assert book.verify() == []
    assert len(lines_of(book)) == 120


def test_emit_event_appends_plain_lines(tmp_path):
    emit_event(tmp_path, "exec_started", node="n1")
    emit_event(tmp_path, "exec_done", node="n1", status="ok")
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [e["kind"] for e in events] == ["exec_started", "exec_done"]
    assert events[1]["status"] == "ok" and "ts" in events[1] and "hash" not in events[1]


def test_an_append_syncs_its_line_alone(tmp_path, synced):
    # The line is the record; ledger.head and the store's anchor of it are written after
    # it and not synced: a crash can lose the newest of them, never hold one the ledger lost.
    (tmp_path / "RING.json").write_text(json.dumps({"ring_id": "r", "store": str(tmp_path / "s")}))
    ledger = Ledger(tmp_path / "ledger.jsonl")
    ledger.append("first")
    del synced[:]
    ledger.append("second", n=2)
    assert synced == [str(ledger.path)]
    assert json.loads(ledger.head_path.read_text()) == ledger.head() == {
        "seq": 2, "hash": ledger.records()[-1]["hash"]}  # fmt: skip
    heads, _ = ledger.context.anchors.heads(ledger.context.identity)
    assert heads[-1] == (2, ledger.records()[-1]["hash"])


@pytest.mark.parametrize("left", [b"", b"\0" * 40, b'{"seq": 2, "ha'])
def test_a_head_a_crash_tore_is_skipped_by_verify(tmp_path, left):
    (tmp_path / "RING.json").write_text(json.dumps({"ring_id": "r", "store": str(tmp_path / "s")}))
    ledger = Ledger(tmp_path / "ledger.jsonl")
    ledger.append("first")
    ledger.append("second")
    ledger.head_path.write_bytes(left)
    layout = RingLayout(tmp_path)
    assert [where for where, _ in ledger_anchors(layout)] == []
    assert ledger.verify(ledger_anchors(layout)) == []
    ledger.append("third")  # the next append writes a whole head again
    assert json.loads(ledger.head_path.read_text())["seq"] == 3


def test_a_withdrawn_record_is_absent_as_the_ledger_says_until_written_again(tmp_path):
    from ringflow.core.records import record_problems

    ledger = Ledger(tmp_path / "ledger.jsonl")
    record = tmp_path / "nodes" / "n1" / "exec" / "v" / "s0" / "result.json"
    ledger.write_record(record, b'{"status": "interrupted"}\n')
    line = ledger.withdraw_record(record, "interrupted: runs again")
    assert line["kind"] == "record_withdrawn" and line["path"] == "nodes/n1/exec/v/s0/result.json"
    assert not record.exists()
    assert record_problems(tmp_path) == []
    assert ledger.withdraw_record(record, "again") is None  # nothing left to withdraw
    record.write_text("{}\n")  # put back by hand
    assert "present, though the ledger" in record_problems(tmp_path)[0]
    ledger.write_record(record, b'{"status": "ok"}\n')  # the run ends again
    assert record_problems(tmp_path) == []
