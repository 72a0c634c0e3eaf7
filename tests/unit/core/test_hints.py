"""Commands printed for the user read right from the folder the user is in."""

from __future__ import annotations

from pathlib import Path

from ringflow.core.hints import ringflow_hint, shown_path, where_the_user_is


def test_paths_are_relative_below_the_folder_the_user_is_in(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PWD", str(tmp_path))
    assert where_the_user_is() == tmp_path
    assert shown_path(tmp_path / "runs" / "r1") == "runs/r1"
    assert shown_path(tmp_path.parent / "elsewhere") == str(tmp_path.parent / "elsewhere")


def test_a_process_started_in_another_folder_says_whole_paths(tmp_path, monkeypatch):
    # As Snakemake does with --directory: the shell started it in `launched`, then it
    # changed folder; `runs/r1` would not be found where the user types the command.
    launched, work = tmp_path / "here", tmp_path / "here" / "wd"
    work.mkdir(parents=True)
    monkeypatch.setenv("PWD", str(launched))
    monkeypatch.chdir(work)
    assert where_the_user_is() is None
    assert shown_path(Path("runs/r1")) == str(work / "runs" / "r1")
    hint = ringflow_hint("export", work / "runs" / "r1", "r1-model")
    assert hint.endswith(f" export {work / 'runs' / 'r1'} r1-model")
    assert not hint.startswith("./")
