"""The command printed after an early end: the user's own command line, changed only where
a new ring is needed."""

from __future__ import annotations

import json
from pathlib import Path

from ringflow.core.recovery import advice, next_ring_id, stop_cause, user_argv, with_config


def test_with_config_keeps_the_users_items_and_sets_the_new_ones_once():
    argv = ["snakemake", "--profile", "gpu", "--config", "final_top_k=2", "ring_id=old",
            "--cores", "4"]  # fmt: skip
    assert with_config(argv, ring_id="old-2", continue_from="runs/old") == [
        "snakemake", "--profile", "gpu", "--cores", "4",
        "--config", "final_top_k=2", "ring_id=old-2", "continue_from=runs/old",
    ]  # fmt: skip
    # A named ring's target is left out: the new ring is the configured one.
    assert with_config(["snakemake", "ring1"], ("ring1",), ring_id="ring1-2") == [
        "snakemake", "--config", "ring_id=ring1-2"
    ]  # fmt: skip


def test_next_ring_id_counts_on_past_taken_names(tmp_path):
    assert next_ring_id("demo", tmp_path) == "demo-2"
    (tmp_path / "demo-2").mkdir()
    assert next_ring_id("demo", tmp_path) == "demo-3"
    assert next_ring_id("demo-2", tmp_path) == "demo-3"


def test_a_launcher_names_its_own_command_line(monkeypatch):
    monkeypatch.setenv("RINGFLOW_COMMAND", "./ringflow run --config a=1")
    assert user_argv() == ["./ringflow", "run", "--config", "a=1"]


def test_each_cause_gets_its_command(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ring = Path("runs") / "r"  # as the workflow names it, relative to its folder
    ring.mkdir(parents=True)
    argv = ["snakemake", "--profile", "profiles/local"]
    said = advice(ring, argv=argv)
    assert said[1] == "    snakemake --profile profiles/local"
    assert said[-1] == "    snakemake --profile profiles/local --unlock"  # after a kill -9
    for cause, command in (
        ("task", "    snakemake --profile profiles/local --config ring_id=r-2 "
                 "continue_from=runs/r"),
        ("machine", "    rm runs/r/STOPPED.json && snakemake --profile profiles/local"),
    ):  # fmt: skip
        (ring / "STOPPED.json").write_text(json.dumps({"reason": "why", "cause": cause}))
        said = advice(ring, argv=argv)
        assert said[0] == "ringflow: the ring runs/r stopped: why"
        assert said[-2].endswith("run:") and said[-1] == command
    # A stop file written before causes were recorded: read from its reason.
    (ring / "STOPPED.json").write_text(json.dumps({"reason": "the task's scorer failed"}))
    assert stop_cause(ring) == "task"


def test_a_task_failure_names_a_copy_of_the_task_to_fix(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ring = Path("runs") / "r"
    ring.mkdir(parents=True)
    Path("mytask").mkdir()
    Path("mytask-fixed").mkdir()  # taken: the next free name is named
    (ring / "RING.json").write_text(json.dumps({"config": {"task": "mytask"}}))
    (ring / "STOPPED.json").write_text(json.dumps({"reason": "why", "cause": "task"}))
    said = advice(ring, argv=["snakemake", "--profile", "profiles/local"])
    assert said[-4:] == [
        said[-4],
        "    cp -r mytask mytask-fixed2",
        "  then run:",
        "    snakemake --profile profiles/local --config task=mytask-fixed2 ring_id=r-2 "
        "continue_from=runs/r",
    ]
    assert said[-4].endswith("Copy the task and fix the copy:")


def test_a_ring_that_continues_the_stopped_one_already_is_the_way_on(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ring = Path("runs") / "r"
    ring.mkdir(parents=True)
    Path("mytask").mkdir()
    (ring / "RING.json").write_text(json.dumps({"config": {"task": "mytask"}}))
    (ring / "STOPPED.json").write_text(json.dumps({"reason": "why", "cause": "task"}))
    # The continuation the first advice printed, run with a fixed copy of the task; and a
    # ring beside them that continues another ring.
    for name, parent, task, created in (("r-2", ring, "mytask-fixed", 10.0),
                                        ("other", Path("runs") / "q", "mytask", 20.0)):  # fmt: skip
        (Path("runs") / name).mkdir()
        chain = {"parent_dir": str(parent.resolve()), "continues": parent.name}
        lock = {"config": {"task": task}, "created_at": created, "chain": chain}
        (Path("runs") / name / "RING.json").write_text(json.dumps(lock))
    said = advice(ring, argv=["snakemake", "--profile", "profiles/local"])
    assert said == [
        "ringflow: the ring runs/r stopped: why",
        "  The ring r-2 continues this one already (with the task mytask-fixed). To go on "
        "with it, run:",
        "    snakemake --profile profiles/local --config ring_id=r-2 continue_from=runs/r "
        "task=mytask-fixed",
    ]
