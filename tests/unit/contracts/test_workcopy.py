"""Working copies: hardlinks to a read-only submission, private where a run may write."""

from __future__ import annotations

import os

from ringflow.workcopy import link_tree, make_readonly_tree, unshare_files


def test_a_working_copy_links_the_read_only_submission(tmp_path):
    submission = tmp_path / "solution"
    (submission / "weights").mkdir(parents=True)
    (submission / "run.py").write_text("print(1)\n")
    (submission / "weights" / "vocab.txt").write_text("a b c\n")
    make_readonly_tree(submission)
    work = tmp_path / "work"
    link_tree(submission, work)
    assert (work / "run.py").stat().st_ino == (submission / "run.py").stat().st_ino
    assert (submission / "run.py").stat().st_mode & 0o222 == 0

    assert unshare_files(work / "weights") == ["vocab.txt"]
    vocab = work / "weights" / "vocab.txt"
    assert vocab.stat().st_ino != (submission / "weights" / "vocab.txt").stat().st_ino
    assert vocab.stat().st_nlink == 1 and os.access(vocab, os.W_OK)
    vocab.write_text("changed\n")
    assert (submission / "weights" / "vocab.txt").read_text() == "a b c\n"
    assert unshare_files(work / "weights") == []
