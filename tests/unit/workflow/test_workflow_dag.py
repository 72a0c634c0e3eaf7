"""The ring's DAG logic (ringflow.workflow.dag) over ring folders written by hand: what
each stage waits for, and the order in which its input functions reach the checkpoints."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from snakemake.io import is_flagged

from ringflow.cluster.slurm import SESSION_SETTLE_MIN
from ringflow.core.jsonio import atomic_write_json, read_json
from ringflow.core.layout import RingLayout
from ringflow.core.reserve import CutoffFile
from ringflow.workflow.checkpoints import CHECKPOINT_OUTPUTS, CheckpointPending, FolderCheckpoints
from ringflow.workflow.dag import RingDag
from ringtools import full_config

VIEWS = {"search": ["proxy", "x3"], "guard": ["guard"], "final": "final"}
STATIC = ["n000-baseline", "n001-a", "n002-b", "n003-c"]


def _node(node: str, role: str, key: str | None = None) -> dict:
    views = [*VIEWS["search"], *VIEWS["guard"], VIEWS["final"]]
    spec = {"key": key} if key else {}
    variants = ["s0", "s0-ablate", "s1", "s2", "g3", "g4"]
    return {
        "id": node,
        "role": role,
        "status": "ready",
        "executions": {v: {x: dict(spec) for x in variants} for v in views},
    }


def make_ring(root: Path, guard: bool = True) -> RingLayout:
    layout = RingLayout(root)
    atomic_write_json(
        layout.ring_json,
        {
            "ring_id": root.name,
            "ring_dir": str(root),
            "search_views": VIEWS["search"],
            "guard_views": VIEWS["guard"],
            "final_view": VIEWS["final"],
            "guard_seeds": [3, 4],
            "search_hash": "h",
            "views": {},
            "config": full_config(
                guard={"enabled": guard},
                limits={"threads": 1, "memory_gb": 1, "time_limit_min": 5},
                exec_health={"term_grace_s": 6},
                scorer_timeout_min=2,
            ),
        },
    )
    nodes = [_node(n, "baseline" if n.endswith("baseline") else "candidate") for n in STATIC]
    nodes[1] = _node("n001-a", "candidate", key="k" * 64)
    nodes[2] = _node("n002-b", "candidate", key="k" * 64)
    index = {
        "nodes": [{k: n[k] for k in ("id", "role", "status")} for n in nodes],
        "baseline": "n000-baseline",
        "keys": {"k" * 64: {"trainer": ["n001-a", "proxy", "s0"], "in_store": False}},
    }
    for node in nodes:
        atomic_write_json(layout.node_json(node["id"]), node)
    atomic_write_json(layout.nodes_static, index)
    atomic_write_json(layout.nodes_index, index)
    atomic_write_json(layout.carryover_imported, {"imported": [], "queue": []})
    return layout


def dag_over(layout: RingLayout, config: dict | None = None) -> tuple[RingDag, FolderCheckpoints]:
    checkpoints = FolderCheckpoints(layout)
    return RingDag(layout, config or full_config(gpus_per_execution=1), checkpoints), checkpoints


def w(**values) -> SimpleNamespace:
    return SimpleNamespace(**values)


def names(paths) -> set[str]:
    """Paths relative to the ring folder (every ring of these tests is tmp_path/r)."""
    return {str(p).split("/r/", 1)[1] for p in paths}


def through_search(layout: RingLayout, engineered: bool = True) -> None:
    """Generation 0 planned n004-eng (ready once settled); generation 1 was the last."""
    atomic_write_json(layout.generation(0), {"generation": 0, "last": False,
                                             "nodes": ["n004-eng"]})  # fmt: skip
    atomic_write_json(layout.settled(0), {"nodes": {"n004-eng": "ready"}})
    atomic_write_json(layout.generation(1), {"generation": 1, "last": True, "nodes": []})
    if engineered:
        atomic_write_json(layout.node_json("n004-eng"), _node("n004-eng", "candidate"))
    atomic_write_json(layout.search, {})
    atomic_write_json(layout.seated, {"baseline": "n000-baseline", "refused": False})


def test_ancient_only_where_the_producer_never_runs_during_an_update(tmp_path):
    """An input that exists is skipped as ancient when Snakemake propagates what must run:
    a file a running job writes during that update would drop every step after it. So the
    ring's own records are plain inputs; a key target that exists is ancient, so re-running
    its trainer never re-runs the replays."""
    layout = make_ring(tmp_path / "r")
    through_search(layout)
    dag, _ = dag_over(layout)
    atomic_write_json(layout.promotion, {"promoted": ["n001-a"]})
    for inputs in (
        dag.search_inputs(w()),
        dag.generation_inputs(w(g="1")),
        dag.search_loop_inputs(w()),
        dag.promoted_inputs(w()),
        list(dag.key_target_inputs(w(key="k" * 64)).values()),
    ):
        assert inputs and not any(is_flagged(path, "ancient") for path in inputs)
    atomic_write_json(layout.key_target("k" * 64), {"key": "k" * 64})
    replay = dag.execution_inputs(w(node="n002-b", view="proxy", variant="s0"))
    assert is_flagged(replay["key"], "ancient")


def test_the_first_generation_waits_for_the_imported_candidates_only(tmp_path):
    """A node the first generation planned is not among that generation's inputs: once it
    was scored, a finished ring would look out of date and plan its search again."""
    layout = make_ring(tmp_path / "r")
    through_search(layout)
    atomic_write_json(layout.nodes_index, {
        **dict(__import__("json").loads(layout.nodes_index.read_text())),
        "nodes": [*[{"id": n, "role": "candidate", "status": "ready"} for n in STATIC[1:]],
                  {"id": "n004-eng", "role": "candidate", "status": "ready"}],
    })  # fmt: skip
    dag, _ = dag_over(layout)
    first = names(dag.generation_inputs(w(g="0")))
    assert first == {
        f"nodes/{n}/exec/{v}/s0/score.json" for n in STATIC[1:] for v in VIEWS["search"]
    }
    second = names(dag.generation_inputs(w(g="1")))
    assert "search/settled-0.json" in second
    assert {f"nodes/n004-eng/exec/{v}/s0/score.json" for v in VIEWS["search"]} <= second


def test_a_generation_is_planned_after_every_earlier_settlement(tmp_path):
    layout = make_ring(tmp_path / "r")
    atomic_write_json(layout.generation(0), {"generation": 0, "last": False, "nodes": ["n4"]})
    dag, checkpoints = dag_over(layout)
    with pytest.raises(CheckpointPending) as pending:
        dag.generation_inputs(w(g="1"))
    assert pending.value.rule == "settle_generation"
    assert [rule for rule, _ in checkpoints.asked] == [
        "import_carryover", "import_nodes", "search_generation", "settle_generation"
    ]  # fmt: skip


def test_final_selection_reaches_its_checkpoints_in_ring_order(tmp_path):
    """Each input function asks for every earlier checkpoint first, so Snakemake learns of
    each completed one before it schedules the next (a killed ring resumes exactly)."""
    layout = make_ring(tmp_path / "r")
    through_search(layout)
    atomic_write_json(layout.promotion, {"promoted": ["n001-a", "n002-b"]})
    atomic_write_json(layout.ranking, {"finalists": ["n002-b", "n001-a"]})
    atomic_write_json(layout.screen("n002-b"), {"extra_variants": []})
    atomic_write_json(layout.review("n002-b"), {"passed": True})
    atomic_write_json(layout.verdict(1), {"node": "n002-b", "replace": False, "eligible": False,
                                          "guard": {"complete": True}})  # fmt: skip
    dag, checkpoints = dag_over(layout)
    with pytest.raises(CheckpointPending) as pending:
        dag.decision_inputs(w())
    assert (pending.value.rule, pending.value.wildcards) == ("screen", {"node": "n001-a"})
    asked = [rule for rule, _ in checkpoints.asked]
    order = list(CHECKPOINT_OUTPUTS)
    firsts = [rule for i, rule in enumerate(asked) if rule not in asked[:i]]
    assert firsts == [rule for rule in order if rule in firsts]
    assert firsts[-5:] == ["promote", "rank", "screen", "review", "verdict"]


def test_promotion_runs_are_planned_once_promotion_is_recorded(tmp_path):
    layout = make_ring(tmp_path / "r")
    through_search(layout)
    dag, _ = dag_over(layout)
    with pytest.raises(CheckpointPending):
        dag.promoted_inputs(w())
    atomic_write_json(layout.promotion, {"promoted": ["n001-a"]})
    assert names(dag.promoted_inputs(w())) == {
        f"nodes/n001-a/exec/{v}/{s}/score.json" for v in VIEWS["search"] for s in ("s1", "s2")
    }


def test_a_verdict_waits_for_its_review_and_guards_both_sides(tmp_path):
    layout = make_ring(tmp_path / "r")
    through_search(layout)
    atomic_write_json(layout.promotion, {"promoted": ["n001-a"]})
    atomic_write_json(layout.ranking, {"finalists": ["n001-a"]})
    dag, _ = dag_over(layout)
    with pytest.raises(CheckpointPending) as pending:
        dag.verdict_inputs(w(rank="1"))
    assert pending.value.rule == "screen"
    atomic_write_json(layout.screen("n001-a"), {"extra_variants": ["real-s0", "blind3-s0"]})
    assert names(dag.review_inputs(w(node="n001-a"))) == {"selection/screen-n001-a.json"} | {
        f"nodes/n001-a/exec/proxy/{v}/score.json" for v in ("real-s0", "blind3-s0")
    }
    with pytest.raises(CheckpointPending) as pending:
        dag.verdict_inputs(w(rank="1"))
    assert pending.value.rule == "review"
    atomic_write_json(layout.review("n001-a"), {"passed": True})
    assert names(dag.verdict_inputs(w(rank="1"))) == {"selection/review-n001-a.json"} | {
        f"nodes/{n}/exec/guard/{g}/score.json"
        for n in ("n001-a", "n000-baseline")
        for g in ("g3", "g4")
    }
    atomic_write_json(layout.screen("n001-a"), {"extra_variants": []})
    atomic_write_json(layout.review("n001-a"), {"passed": False})
    dag, _ = dag_over(layout)  # a fresh read (records are frozen once written)
    assert names(dag.verdict_inputs(w(rank="1"))) == {"selection/review-n001-a.json"}


def _decision_after_first_verdict(tmp_path, verdict: dict) -> set[str]:
    """The decision's inputs once the rank-1 finalist n001-a has the verdict given."""
    layout = make_ring(tmp_path / "r")
    through_search(layout)
    atomic_write_json(layout.promotion, {"promoted": ["n001-a", "n002-b"]})
    atomic_write_json(layout.ranking, {"finalists": ["n001-a", "n002-b"]})
    atomic_write_json(layout.screen("n001-a"), {"extra_variants": []})
    atomic_write_json(layout.review("n001-a"), {"passed": True})
    atomic_write_json(layout.verdict(1), {"node": "n001-a", "eligible": True, **verdict})
    dag, _ = dag_over(layout)
    return names(dag.decision_inputs(w()))


def test_a_replacement_ends_selection_and_the_decision_waits_for_the_final_view(tmp_path):
    inputs = _decision_after_first_verdict(
        tmp_path, {"replace": True, "reason": "LCB > margin", "guard": {"complete": True}}
    )
    assert "selection/verdict-1.json" in inputs and "selection/verdict-2.json" not in inputs
    assert {
        "nodes/n000-baseline/exec/final/s0/score.json",
        "nodes/n001-a/exec/final/s0/score.json",
    } <= inputs


def test_an_incomplete_guard_ends_selection_with_the_baseline(tmp_path):
    inputs = _decision_after_first_verdict(
        tmp_path, {"replace": False, "reason": "incomplete", "guard": {"complete": False}}
    )
    assert "selection/review-n002-b.json" not in inputs
    assert "nodes/n001-a/exec/final/s0/score.json" not in inputs
    assert "nodes/n000-baseline/exec/final/s0/score.json" in inputs


def test_without_the_guard_no_finalist_is_reviewed(tmp_path):
    layout = make_ring(tmp_path / "r", guard=False)
    through_search(layout)
    atomic_write_json(layout.promotion, {"promoted": ["n001-a"]})
    atomic_write_json(layout.ranking, {"finalists": ["n001-a"]})
    dag, checkpoints = dag_over(layout)
    inputs = names(dag.decision_inputs(w()))
    assert not any("review" in rule or "verdict" in rule for rule, _ in checkpoints.asked)
    assert "nodes/n001-a/exec/final/s0/score.json" in inputs


def test_a_replayer_waits_for_its_key_and_the_trainer_does_not(tmp_path):
    layout = make_ring(tmp_path / "r")
    dag, _ = dag_over(layout)
    key = "k" * 64
    assert dag.execution_inputs(w(node="n001-a", view="proxy", variant="s0")) == {}
    replay = dag.execution_inputs(w(node="n002-b", view="proxy", variant="s0"))
    assert names([replay["key"]]) == {f"keys/{key}.json"}
    assert dag.key_target_inputs(w(key=key))["trainer"].endswith(
        "nodes/n001-a/exec/proxy/s0/result.json"
    )


def test_a_key_target_is_ancient_only_once_no_job_can_write_it_again(tmp_path):
    """Snakemake drops a job whose ancient input exists while that input's job still runs
    when a checkpoint completes, and every step after it. So a replayer takes the target as
    a plain input until it exists; once it exists it is ancient, and its job no longer
    waits for the trainer, so a trainer run again (its result deleted) writes no target
    and re-runs no replay."""
    layout = make_ring(tmp_path / "r")
    dag, _ = dag_over(layout)
    key = "k" * 64
    replayer = w(node="n002-b", view="proxy", variant="s0")
    before = dag.execution_inputs(replayer)["key"]
    assert names([before]) == {f"keys/{key}.json"} and not is_flagged(before, "ancient")
    assert "trainer" in dag.key_target_inputs(w(key=key))

    atomic_write_json(layout.key_target(key), {"key": key})
    after = dag.execution_inputs(replayer)["key"]
    assert names([after]) == {f"keys/{key}.json"} and is_flagged(after, "ancient")
    assert dag.key_target_inputs(w(key=key)) == {}


def test_the_records_after_the_decision_are_ancient_once_made(tmp_path):
    """A user's own report of a finished ring leaves it finished (ancient inputs); before
    the records exist their jobs may be running when a checkpoint completes, so they are
    plain inputs then."""
    layout = make_ring(tmp_path / "r")
    dag, _ = dag_over(layout)
    inputs = dag.once_made(lock="ring_json", report="report")
    made = inputs(w())
    assert names(made.values()) == {"RING.json", "report.html"}
    assert is_flagged(made["lock"], "ancient") and not is_flagged(made["report"], "ancient")
    layout.report.write_text("<html></html>")
    assert is_flagged(inputs(w())["report"], "ancient")


def test_a_chains_parent_files_are_ancient_once_made(tmp_path):
    """A parent ring running in the same invocation may still be writing its stop manifest
    when a checkpoint completes: plain until made, ancient after."""
    layout = make_ring(tmp_path / "r")
    parent = RingLayout(tmp_path / "p")
    dag = RingDag(layout, full_config(), FolderCheckpoints(layout), chain_parent=str(parent.root))
    assert (
        RingDag(layout, full_config(), FolderCheckpoints(layout)).chain_parent_inputs(
            "stop_manifest"
        )
        == []
    )
    (before,) = dag.chain_parent_inputs("stop_manifest")
    assert before == str(parent.stop_manifest) and not is_flagged(before, "ancient")
    atomic_write_json(parent.stop_manifest, {})
    (after,) = dag.chain_parent_inputs("stop_manifest")
    assert is_flagged(after, "ancient")


def test_seed_zero_on_the_first_search_view_goes_first(tmp_path):
    layout = make_ring(tmp_path / "r")
    dag, _ = dag_over(layout)
    first = dag.execution_priority(w(node="n001-a", view="proxy", variant="s0"))
    other = dag.execution_priority(w(node="n001-a", view="x3", variant="s0"))
    later = dag.execution_priority(w(node="n001-a", view="proxy", variant="s1"))
    assert first > other > later


def test_resources_follow_the_views_limits(tmp_path):
    layout = make_ring(tmp_path / "r")
    dag, _ = dag_over(layout)
    one = w(node="n001-a", view="proxy", variant="s0")
    assert dag.execution_threads(one) == 1
    assert dag.execution_mem_mb(one) == 1024 + 512
    assert dag.execution_runtime(one) == int(5 + 0.1 + 2) + 1
    assert dag.execution_gpus(one) == 0  # no GPU slots declared by the profile


def test_a_sessions_job_may_run_to_its_hand_over_point(tmp_path):
    layout = make_ring(tmp_path / "r")
    ring = read_json(layout.ring_json)
    now = time.time()
    atomic_write_json(layout.ring_json, {**ring, "stop_at": now + 4 * 3600})
    CutoffFile(layout.cutoff).ensure(now + 3 * 3600, reserve_min=60)
    dag, _ = dag_over(layout)
    # The cutoff in 3 h, the hand-over node_tail_min before it; grace 6 s; 5 min to settle.
    tail = ring["config"]["timeline"]["node_tail_min"]
    expected = int(180 - tail + 0.1 + SESSION_SETTLE_MIN) + 1
    assert dag.session_runtime(w(node="n009-new")) in (expected - 1, expected)


def test_review_and_guard_runs_follow_the_finalists_rank(tmp_path):
    """Under a tight clock the rank-1 finalist's review and guard runs (and the other side
    of its guard) start before the rank-2's."""
    layout = make_ring(tmp_path / "r")
    through_search(layout)
    dag, _ = dag_over(layout)
    unranked = dag.execution_priority(w(node="n001-a", view="proxy", variant="blind-s0"))
    atomic_write_json(layout.ranking, {"finalists": ["n002-b", "n001-a"]})
    dag, _ = dag_over(layout)

    def priority(node: str, view: str, variant: str) -> int:
        return dag.execution_priority(w(node=node, view=view, variant=variant))

    first, second = "n002-b", "n001-a"
    assert priority(first, "proxy", "blind-s0") > priority(second, "proxy", "blind-s0")
    assert priority(first, "proxy", "real-s0") > priority(second, "proxy", "blind3-s0")
    assert priority(first, "guard", "g3") > priority(second, "guard", "g3")
    assert priority("n000-baseline", "guard", "g3") == priority(first, "guard", "g3")
    # Above the search's own runs, and only once the finalists are ranked.
    assert priority(second, "guard", "g4") > priority("n003-c", "proxy", "s0") > unranked
    assert priority("n003-c", "guard", "g3") == priority("n003-c", "proxy", "s1")


def test_a_rewritten_node_record_is_read_again(tmp_path):
    # The input functions ask for a node several times for every job, so its parsed record
    # is kept; a node.json replaced since (a later version) must not be answered from it.
    layout = make_ring(tmp_path / "r")
    dag, _ = dag_over(layout)
    one = w(node="n003-c", view="proxy", variant="s0")
    assert dag.node("n003-c") is dag.node("n003-c")
    assert dag.execution_inputs(one) == {}
    atomic_write_json(layout.node_json("n003-c"), _node("n003-c", "candidate", key="k" * 64))
    assert names([dag.execution_inputs(one)["key"]]) == {f"keys/{'k' * 64}.json"}


def test_a_completed_checkpoint_is_given_again_without_asking_snakemake():
    # Snakemake's own Checkpoint.get over a rule that expands its one output: pending until
    # its output is among the created outputs, then complete for good (that set only grows
    # while Snakemake runs), so the output is kept and the rule not expanded again.
    from snakemake.checkpoints import Checkpoints
    from snakemake.exceptions import IncompleteCheckpointException
    from snakemake.iocontainers import OutputFiles

    from ringflow.workflow.checkpoints import SnakemakeCheckpoints

    class ScreenRule:  # what Checkpoint.get reads of a rule
        name = "screen"
        wildcard_names = frozenset({"node"})
        expanded = 0

        def expand_output(self, wildcards):
            ScreenRule.expanded += 1
            output = OutputFiles([f"runs/r/final/{wildcards['node']}/screen.json"])
            output._set_name("screen", 0)
            return output, {}

    namespace = Checkpoints().spawn_new_namespace()
    namespace.register(ScreenRule())
    checkpoints = SnakemakeCheckpoints(namespace)
    with pytest.raises(IncompleteCheckpointException):
        checkpoints.output("screen", node="n001-a")
    namespace.created_output.add("runs/r/final/n001-a/screen.json")
    first = checkpoints.output("screen", node="n001-a")
    asked = ScreenRule.expanded
    assert (
        checkpoints.output("screen", node="n001-a")
        == first
        == Path("runs/r/final/n001-a/screen.json")
    )
    assert ScreenRule.expanded == asked  # given again without asking
    with pytest.raises(IncompleteCheckpointException):  # another node's is still pending
        checkpoints.output("screen", node="n002-b")
