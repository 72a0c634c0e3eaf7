"""Import of sealed work into a continuing ring (docs/operations.md#carryover): every file checked
against SEAL.json and the seal against the ledger before anything is copied."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from carrytools import ledger_records, ring_with_cut
from ringflow.carryover.executions import seal_ring
from ringflow.carryover.importing import import_carryover
from ringflow.core.errors import InputError
from ringflow.ring.lock import lock_ring
from ringtools import full_config


def read(path):
    return json.loads(path.read_text())


def continuing(work: Path, parent: Path, ring_id: str = "b", **overrides) -> Path:
    config = full_config(ring_id=ring_id, continue_from=f"runs/{parent.name}", task="",
                         candidates="", baseline="", **overrides)  # fmt: skip
    return Path(lock_ring(config, work).ring_dir)


@pytest.fixture
def sealed(tmp_path):
    """Ring a with one sealed node, and ring b, locked, continuing from it."""
    ring = ring_with_cut(tmp_path)
    seal_ring(ring)
    return ring, continuing(tmp_path, ring)


def writable(path: Path) -> Path:
    os.chmod(path, stat.S_IMODE(path.stat().st_mode) | 0o200)
    return path


def test_verified_work_is_copied_and_queued(sealed):
    a, b = sealed
    done = import_carryover(b)
    assert done["rejected"] == []
    assert done["queue"] == ["a#n001-slow"]
    (item,) = done["imported"]
    copy = b / item["copy"]
    original = a / "nodes" / "n001-slow" / "carryover"
    for f in read(original / "SEAL.json")["files"]:
        assert (copy / f["path"]).read_bytes() == (original / f["path"]).read_bytes()
    assert (copy / "SEAL.json").read_bytes() == (original / "SEAL.json").read_bytes()
    (segment,) = item["segments"]
    assert segment["ring"] == "a" and segment["node"] == "n001-slow"
    assert segment["seal_sha256"] == ledger_records(a, "carryover_sealed")[0]["seal_sha256"]
    assert [r["identity"] for r in ledger_records(b, "carryover_imported")] == ["a#n001-slow"]
    # Importing again (a rerun) adds nothing.
    assert import_carryover(b)["queue"] == ["a#n001-slow"]
    assert len(ledger_records(b, "carryover_imported")) == 1


def change_a_byte(snapshot: Path) -> str:
    target = writable(snapshot / "solution" / "run.py")
    data = bytearray(target.read_bytes())
    data[10] ^= 1
    target.write_bytes(bytes(data))
    return "solution/run.py: content differs"


def delete_a_file(snapshot: Path) -> str:
    os.chmod(snapshot / "solution", 0o755)
    (snapshot / "solution" / "behaviour.json").unlink()
    return "solution/behaviour.json: missing"


def add_a_file(snapshot: Path) -> str:
    (snapshot / "solution" / "extra.py").write_text("print('not sealed')\n")
    return "solution/extra.py: not in SEAL.json (added)"


def replace_by_symlink(snapshot: Path) -> str:
    target = snapshot / "solution" / "run.py"
    target.unlink()
    target.symlink_to("/etc/hostname")
    return "solution/run.py: is a symlink"


def edit_seal(snapshot: Path) -> str:
    seal_path = writable(snapshot / "SEAL.json")
    seal = read(seal_path)
    seal["skipped"].append({"path": "solution/secret", "why": "symlink", "size": 1})
    seal_path.write_text(json.dumps(seal))
    return "SEAL.json was edited"


def edit_ledger_line(snapshot: Path) -> str:
    """SEAL.json edited, and the ledger line changed to its new hash to match."""
    import hashlib

    edit_seal(snapshot)
    ring = snapshot.parents[2]
    ledger = ring / "ledger.jsonl"
    lines = ledger.read_text().splitlines()
    new_hash = hashlib.sha256((snapshot / "SEAL.json").read_bytes()).hexdigest()
    for i, line in enumerate(lines):
        record = json.loads(line)
        if record["kind"] == "carryover_sealed":
            record["seal_sha256"] = new_hash
            lines[i] = json.dumps(record, sort_keys=True, separators=(",", ":"))
    ledger.write_text("\n".join(lines) + "\n")
    return "does not match its own hash (the line was edited)"


@pytest.mark.parametrize(
    "tamper",
    [change_a_byte, delete_a_file, add_a_file, replace_by_symlink, edit_seal, edit_ledger_line],
)
def test_tampered_work_is_rejected_with_its_reason_and_nothing_is_copied(sealed, tamper):
    a, b = sealed
    snapshot = a / "nodes" / "n001-slow" / "carryover"
    os.chmod(snapshot, 0o755)
    expected = tamper(snapshot)
    done = import_carryover(b)
    assert done["imported"] == [] and done["queue"] == []
    (rejected,) = done["rejected"]
    assert rejected["identity"] == "a#n001-slow"
    assert expected in rejected["reason"]
    imported = b / "carryover" / "imported"
    assert not imported.exists() or not list(imported.iterdir()), "something was copied"
    (record,) = ledger_records(b, "carryover_rejected")
    assert record["identity"] == "a#n001-slow" and expected in record["reason"]


def test_a_ring_refuses_to_continue_from_a_ring_whose_seal_line_was_edited(sealed, tmp_path):
    a, _ = sealed
    edit_ledger_line(a / "nodes" / "n001-slow" / "carryover")
    with pytest.raises(InputError, match=r"does not verify.*hash does not match"):
        continuing(tmp_path, a, ring_id="c")
