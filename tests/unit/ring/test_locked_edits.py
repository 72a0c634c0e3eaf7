"""A locked ring notices edits (issue: an edited candidate printed "Nothing to be done", an
edited scorer was used silently and `verify` still passed)."""

from __future__ import annotations

import pytest

from ringflow.core.errors import InputError
from ringflow.ring.edits import find_edits, refuse_edits
from ringflow.verify import verify_ring
from ringtools import locked_ring, make_candidate


@pytest.fixture
def ring(tmp_path):
    cands = tmp_path / "cands"
    make_candidate(cands / "a", mean=0.5, weights=True)
    return tmp_path, locked_ring(tmp_path, cands, "r1")


def test_an_untouched_ring_has_no_edits(ring):
    _, root = ring
    assert find_edits(root) == []
    refuse_edits(root, "r1")
    assert not [p for p in verify_ring(root) if p.startswith("edited")]


def test_per_view_weights_written_beside_a_candidate_are_not_an_edit(ring):
    work, root = ring
    (work / "cands" / "a" / "weights").mkdir()
    (work / "cands" / "a" / "weights" / "model.txt").write_text("trained by hand\n")
    (work / "cands" / "a" / "progress.json").write_text("{}")
    assert find_edits(root) == []


@pytest.mark.parametrize(
    "edit, named",
    [
        (lambda w: (w / "cands" / "a" / "run.py").write_text("print('new')\n"), "cands/a (n001-a)"),
        (lambda w: make_candidate(w / "cands" / "b", mean=0.9), "cands/b was added"),
        (lambda w: (w / "task" / "scorer.py").write_text("# edited\n"), "the scorer"),
        (lambda w: (w / "task" / "task.yaml").write_text("name: x\n"), "task.yaml"),
        (lambda w: (w / "task" / "views/x3/labels/truth.txt").write_text("0\n"), "x3/labels/"),
        (lambda w: (w / "task" / "views/proxy/inputs/more.txt").write_text("1\n"), "proxy/inputs/"),
    ],
)
def test_each_edit_is_named_refused_and_failed_by_verify(ring, edit, named):
    work, root = ring
    edit(work)
    edits = find_edits(root)
    assert len(edits) == 1 and named in edits[0], edits
    with pytest.raises(InputError, match="ring_id=r1-2") as refused:
        refuse_edits(root, "r1")
    assert named in str(refused.value)
    assert any(p.startswith("edited: ") and named in p for p in verify_ring(root))


def test_a_removed_candidate_folder_is_reported(ring):
    work, root = ring
    import shutil

    shutil.rmtree(work / "cands" / "a")
    assert find_edits(root) == [
        f"{work / 'cands' / 'a'} (n001-a) was removed after the ring was locked"
    ]
