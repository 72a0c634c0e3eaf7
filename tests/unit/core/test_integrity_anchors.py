"""Anchors outside the ring folder (docs/integrity.md): deciding records hashed into the
ledger, the ledger signed with and anchored in the store, so that an editor of the ring
folder alone is caught by `ringflow verify` and by a ring continuing it."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import pytest
from test_carryover_import import continuing
from test_carryover_scores import nodes_of, scored_parent

from carrytools import ledger_records, ring_with_cut
from ringflow.carryover.executions import seal_ring
from ringflow.carryover.importing import import_carryover
from ringflow.core.anchors import StoreAnchors
from ringflow.core.jsonio import canonical_json
from ringflow.core.ledger import GENESIS, Ledger, record_hash
from ringflow.core.records import record_problems, write_record
from ringflow.verify import verify_ring


def read(path: Path):
    return json.loads(path.read_text())


def writable(path: Path) -> Path:
    os.chmod(path, stat.S_IMODE(path.stat().st_mode) | 0o200)
    return path


def fake_lock(folder: Path, ring_id: str, store: Path) -> None:
    (folder / "RING.json").write_text(json.dumps({"ring_id": ring_id, "store": str(store)}))


@pytest.fixture
def anchored(tmp_path) -> Ledger:
    """A ledger beside a RING.json naming a store: a ring's ledger, anchored in it."""
    fake_lock(tmp_path, "r", tmp_path / "store")
    book = Ledger(tmp_path / "ledger.jsonl")
    for index in range(4):
        book.append("step", index=index)
    return book


def rechain(lines: list[dict], drop_sig: bool = False) -> list[dict]:
    """What an editor of the ring folder can do: recompute every prev and hash."""
    prev, out = GENESIS, []
    for record in lines:
        record = {k: v for k, v in record.items() if not (drop_sig and k == "sig")}
        record["prev"] = prev
        record["hash"] = record_hash(record)
        prev = record["hash"]
        out.append(record)
    return out


def write_ledger(book: Ledger, records: list[dict]) -> None:
    book.path.write_bytes(b"".join(canonical_json(r) + b"\n" for r in records))
    last = records[-1] if records else {"seq": 0, "hash": GENESIS}
    book.head_path.write_text(json.dumps({"seq": last["seq"], "hash": last["hash"]}))


def test_an_anchored_ledger_is_signed_and_its_heads_are_in_the_store(anchored):
    assert anchored.verify() == []
    store = StoreAnchors(anchored.path.parent / "store")
    assert stat.S_IMODE(store.secret_path.stat().st_mode) == 0o600
    records = anchored.records()
    assert all(isinstance(r.get("sig"), str) for r in records)
    heads, problems = store.heads(anchored.context.identity)
    assert problems == [] and heads == [(r["seq"], r["hash"]) for r in records]


@pytest.mark.parametrize("drop_sig", [False, True])
def test_a_ledger_edited_and_rechained_in_the_ring_folder_does_not_verify(anchored, drop_sig):
    records = anchored.records()
    records[1]["index"] = 99
    write_ledger(anchored, rechain(records, drop_sig))
    # The chain and ledger.head agree: only the store catches it.
    assert Ledger(anchored.path)._verify_chain(anchored.path.read_bytes()) == []
    problems = anchored.verify([("ledger.head", read(anchored.head_path))])
    assert any("not signed with the secret" in p for p in problems), problems


def test_a_ledger_cut_short_or_rolled_back_does_not_verify(anchored):
    records = anchored.records()
    write_ledger(anchored, records[:2])
    problems = anchored.verify([("ledger.head", read(anchored.head_path))])
    assert any("cut short or rolled back" in p for p in problems), problems


def test_a_ledger_of_another_ring_on_the_same_store_does_not_verify_here(anchored, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    fake_lock(other, "r2", tmp_path / "store")
    (other / "ledger.jsonl").write_bytes(anchored.path.read_bytes())
    problems = Ledger(other / "ledger.jsonl").verify()
    assert any("not signed" in p for p in problems) and any("anchors no head" in p
                                                            for p in problems)  # fmt: skip


def test_an_edited_anchors_line_is_reported(anchored):
    store = StoreAnchors(anchored.path.parent / "store")
    lines = store.heads_path.read_text().splitlines()
    line = json.loads(lines[-1])
    line["hash"] = "f" * 64
    lines[-1] = json.dumps(line)
    store.heads_path.write_text("\n".join(lines) + "\n")
    assert any("MAC does not match" in p for p in anchored.verify())


def test_records_are_hashed_as_written_and_an_edit_is_caught(anchored):
    root = anchored.path.parent
    path = root / "nodes" / "n1" / "exec" / "proxy" / "s0" / "score.json"
    write_record(root, path, {"score": 0.5})
    (line,) = [r for r in anchored.records() if r["kind"] == "record_written"]
    assert line["path"] == "nodes/n1/exec/proxy/s0/score.json"
    assert line["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert record_problems(root) == []
    write_record(root, path, {"score": 0.6})  # written again: the latest hash counts
    assert record_problems(root) == []
    path.write_text(json.dumps({"score": 0.999}))
    (problem,) = record_problems(root)
    assert "score.json: edited after it was written" in problem
    # A deciding record that never went through the ledger is named too.
    stray = root / "nodes" / "n1" / "exec" / "proxy" / "s1" / "result.json"
    stray.parent.mkdir(parents=True)
    stray.write_text("{}")
    assert any("s1/result.json: not hashed into the ledger" in p for p in record_problems(root))


# ------------------------------------------------------------- scores, continuation


def test_an_edited_score_is_caught_by_verify_and_not_imported_by_a_continuation(tmp_path):
    a = scored_parent(tmp_path, means={"alpha": 0.5, "beta": 0.3})
    assert not [p for p in verify_ring(a) if p.startswith("record:")]
    beta = next(n for n in nodes_of(a) if read(a / "nodes" / n / "node.json")["name"] == "beta")
    score = a / "nodes" / beta / "exec" / "proxy" / "s0" / "score.json"
    score.write_text(json.dumps({**read(score), "score": 0.999}))
    problems = verify_ring(a)
    assert any(p.startswith("record:") and f"{beta}/exec/proxy/s0/score.json: edited" in p
               for p in problems), problems  # fmt: skip
    b = continuing(tmp_path, a)
    done = import_carryover(b)
    assert [e["node"] for e in done["scored"]] == [n for n in nodes_of(a) if n != beta]
    (rejected,) = done["scores_rejected"]
    assert (
        rejected["node"] == beta
        and "score.json: edited after it was written" in (rejected["reason"])
    )
    (record,) = ledger_records(b, "carryover_rejected")
    assert record["identity"] == f"a#{beta}" and record["what"] == "scores"


def test_a_score_edited_with_its_ledger_line_rechained_is_not_imported(tmp_path):
    a = scored_parent(tmp_path, means={"alpha": 0.5})
    b = continuing(tmp_path, a)  # locked while a was intact
    (alpha,) = nodes_of(a)
    score = a / "nodes" / alpha / "exec" / "proxy" / "s0" / "score.json"
    score.write_text(json.dumps({**read(score), "score": 0.999}))
    book = Ledger(a / "ledger.jsonl")
    records = book.records()
    rel = f"nodes/{alpha}/exec/proxy/s0/score.json"
    for record in records:
        if record["kind"] == "record_written" and record["path"] == rel:
            record["sha256"] = hashlib.sha256(score.read_bytes()).hexdigest()
    write_ledger(book, rechain(records))
    assert not any("score.json" in p for p in record_problems(a))  # the folder agrees
    assert any("not signed with the secret" in p for p in verify_ring(a))
    done = import_carryover(b)
    assert done["scored"] == []
    (rejected,) = done["scores_rejected"]
    assert "does not verify against its anchors" in rejected["reason"]


# ---------------------------------------------------------------- seals, continuation


def reseal(snapshot: Path) -> None:
    """Edit a sealed run.py and cover every trace inside the ring folder: SEAL.json, the
    seal's hash wherever it is named, the ledger re-chained, ledger.head and every copy
    of the head rewritten."""
    ring = snapshot.parents[2]
    os.chmod(snapshot, 0o755)
    os.chmod(snapshot / "solution", 0o755)
    run_py = writable(snapshot / "solution" / "run.py")
    run_py.write_text(run_py.read_text() + "\nprint('injected')\n")
    seal_path = writable(snapshot / "SEAL.json")
    seal = read(seal_path)
    for item in seal["files"]:
        if item["path"] == "solution/run.py":
            item["sha256"] = hashlib.sha256(run_py.read_bytes()).hexdigest()
            item["size"] = run_py.stat().st_size
    seal_path.write_bytes(canonical_json(seal) + b"\n")
    old_sha = None
    new_sha = hashlib.sha256(seal_path.read_bytes()).hexdigest()
    book = Ledger(ring / "ledger.jsonl")
    records = book.records()
    for record in records:
        if record["kind"] == "carryover_sealed":
            old_sha, record["seal_sha256"] = record["seal_sha256"], new_sha
    records = rechain(records)
    write_ledger(book, records)
    head = {"seq": records[-1]["seq"], "hash": records[-1]["hash"]}
    for path in [*ring.glob("nodes/*/exec/*/*/result.json"), ring / "stop_manifest.json"]:
        if path.is_file():
            text = path.read_text().replace(old_sha, new_sha)
            data = json.loads(text)
            if "ledger_head" in data:
                data["ledger_head"] = head
            writable(path).write_text(json.dumps(data))
    for path in ring.glob("nodes/*/node.json"):
        path.write_text(path.read_text().replace(old_sha, new_sha))


def test_a_reseal_with_the_ledger_rechained_is_caught_by_verify_and_rejected(tmp_path):
    a = ring_with_cut(tmp_path)
    seal_ring(a)
    b = continuing(tmp_path, a)  # locked while a was intact
    assert not [p for p in verify_ring(a) if "ledger" in p or "seal" in p]
    reseal(a / "nodes" / "n001-slow" / "carryover")
    problems = verify_ring(a)
    assert any("not signed with the secret" in p for p in problems), problems
    assert not [p for p in problems if p.startswith("seal:")]  # the folder agrees with itself
    done = import_carryover(b)
    assert done["imported"] == [] and done["queue"] == []
    (rejected,) = done["rejected"]
    assert rejected["identity"] == "a#n001-slow"
    assert "does not verify against its anchors" in rejected["reason"]
    assert not (b / "carryover" / "imported" / "a--n001-slow").exists()
    (record,) = ledger_records(b, "carryover_rejected")
    assert record["identity"] == "a#n001-slow"
