"""The search's pure parts: the parent lottery, generation planning, and the engineer's
instructions in native and blind mode (issue: the search phase)."""

from __future__ import annotations

import copy
import dataclasses
import random
import time
from collections import Counter

from ringflow.core.clock import load_ring
from ringflow.core.jsonio import atomic_write_json, read_json
from ringflow.core.layout import RingLayout
from ringflow.core.node_state import Node
from ringflow.core.reserve import CutoffFile
from ringflow.core.settings import RingConfig
from ringflow.search import instructions
from ringflow.search.lottery import draw_parents, ranked, tickets
from ringflow.search.plan import plan_generation
from ringtools import locked_ring, make_candidate

BUILTIN = {"command": "builtin", "builtin_delay_s": 0, "network": False, "env_pass": [],
           "mounts": [], "stall_min": 30, "template": None}  # fmt: skip


def test_ranks_follow_the_direction_and_negative_scores_work():
    scores = {"n001-a": -3.0, "n002-b": -1.0, "n003-c": -2.0}
    assert ranked(scores, "maximize") == ["n002-b", "n003-c", "n001-a"]
    assert ranked(scores, "minimize") == ["n001-a", "n003-c", "n002-b"]
    assert tickets(3) == [3, 2, 1]


def test_lottery_draws_by_rank_weight():
    scores = {"n001-best": 10.0, "n002-mid": 5.0, "n003-worst": -100.0}
    draws = Counter(draw_parents(scores, "maximize", 60000, random.Random(1)))
    # Tickets 3:2:1 -> 1/2, 1/3, 1/6 of the draws.
    assert abs(draws["n001-best"] / 60000 - 1 / 2) < 0.01
    assert abs(draws["n002-mid"] / 60000 - 1 / 3) < 0.01
    assert abs(draws["n003-worst"] / 60000 - 1 / 6) < 0.01
    assert draw_parents({}, "maximize", 3, random.Random(1)) == []


def _score(ring_dir, node, value):
    ring = load_ring(ring_dir)
    for view in ring.search_views:
        path = RingLayout(ring_dir).score(node, view, "s0")
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, {"score": value, "valid": True, "scored": True, "reason": ""})


def test_a_generation_draws_parents_among_scored_nodes(tmp_path):
    cands = tmp_path / "cands"
    for name in ("a", "b", "c"):
        make_candidate(cands / name, mean=0.5)
    ring_dir = locked_ring(tmp_path, cands, "plan", engineer=BUILTIN,
                           search={"max_nodes": 6, "max_concurrent_nodes": 2,
                                   "draft_fraction": 0.0, "feedback": "native",
                                   "queries_per_node": 20})  # fmt: skip
    _score(ring_dir, "n001-a", 0.9)
    _score(ring_dir, "n002-b", 0.1)  # n003-c is not scored: never a parent
    plan = plan_generation(ring_dir, 0)
    assert not plan["last"] and len(plan["nodes"]) == 2
    assert [row["node"] for row in plan["lottery"]] == ["n001-a", "n002-b"]
    for node_id in plan["nodes"]:
        node = read_json(RingLayout(ring_dir).node_json(node_id))
        assert node["origin"]["kind"] == "improve" and node["parent"] in ("n001-a", "n002-b")
        assert node["status"] == "engineering" and node["operator"] == "builtin"
        assert node["queries_used"] is None
    index = read_json(RingLayout(ring_dir).nodes_index)
    assert [n["id"] for n in index["nodes"]][-2:] == plan["nodes"]
    # Planned once: a resumed ring reads the same plan; one that died before writing its
    # plan finds its nodes again instead of planning more.
    assert plan_generation(ring_dir, 0) == plan
    RingLayout(ring_dir).generation(0).unlink()
    assert plan_generation(ring_dir, 0)["nodes"] == plan["nodes"]
    # One slot left under max_nodes = 6.
    assert len(plan_generation(ring_dir, 1)["nodes"]) == 1
    last = plan_generation(ring_dir, 2)
    assert last["last"] and "max_nodes" in last["reason"] and last["nodes"] == []


def test_no_engineer_means_one_empty_last_generation(tmp_path):
    make_candidate(tmp_path / "cands" / "a", mean=0.5)
    ring_dir = locked_ring(tmp_path, tmp_path / "cands", "static")
    plan = plan_generation(ring_dir, 0)
    assert plan["last"] and plan["nodes"] == [] and "no engineer" in plan["reason"]


def test_no_generation_after_the_handover_point(tmp_path):
    make_candidate(tmp_path / "cands" / "a", mean=0.5)
    ring_dir = locked_ring(tmp_path, tmp_path / "cands", "late", engineer=BUILTIN)
    # node_tail_min is 1: 30 s before the cutoff the hand-over point has passed.
    assert CutoffFile(RingLayout(ring_dir).cutoff).move_earlier(time.time() + 30, why="test")
    plan = plan_generation(ring_dir, 0)
    assert plan["last"] and "hand-over" in plan["reason"]


def test_native_and_blind_instructions_differ_only_in_the_feedback_section(tmp_path):
    cands = tmp_path / "cands"
    make_candidate(cands / "a", mean=0.5)
    (cands / "a" / "METHOD.md").write_text("Predict the mean.\n")
    make_candidate(cands / "b", mean=0.5)
    ring_dir = locked_ring(tmp_path, cands, "words", engineer=BUILTIN)
    layout = RingLayout(ring_dir)
    _score(ring_dir, "n001-a", 0.75)
    _score(ring_dir, "n002-b", 0.25)
    # n002-b pretends to be a worse child of n001-a: a refuted direction.
    node_b = read_json(layout.node_json("n002-b"))
    atomic_write_json(layout.node_json("n002-b"), {**node_b, "parent": "n001-a"})
    ring = load_ring(ring_dir)
    node = Node.from_record({"id": "n003-a-g0", "origin": {"kind": "improve"}, "parent": "n001-a"})
    texts = {}
    for mode in ("native", "blind"):
        config = copy.deepcopy(ring.config.to_mapping())
        config["search"]["feedback"] = mode
        variant = dataclasses.replace(ring, config=RingConfig.from_mapping(config))
        texts[mode] = instructions.render(instructions.context(variant, layout, node, 1e9))
    native_head, native_feedback = texts["native"].split("## Feedback")
    blind_head, blind_feedback = texts["blind"].split("## Feedback")
    assert native_head == blind_head
    assert "Predict the mean." in native_head and "n002-b (from n001-a)" in native_head
    assert "0.75" in native_feedback and "0.25" in native_feedback
    assert "queries left: 20" in native_feedback
    assert "0.75" not in texts["blind"] and "0.25" not in texts["blind"]
    assert "No scores are shown" in blind_feedback


def test_builtin_engineer_changes_one_hyper_parameter_of_each_demo_candidate(tmp_path):
    import shutil

    from ringflow.demo import candidates_dir
    from ringflow.search import builtin_engineer

    for source in sorted(candidates_dir().iterdir()):
        if source.name == "crasher":
            continue
        work = tmp_path / source.name
        shutil.copytree(source, work)
        before = (work / "run.py").read_text()
        change = builtin_engineer.mutate_source(work, random.Random(source.name))
        after = (work / "run.py").read_text()
        assert change and after != before, source.name
        compile(after, str(work / "run.py"), "exec")  # still a program
        changed = [(a, b) for a, b in zip(before.splitlines(), after.splitlines(), strict=True)
                   if a != b]  # fmt: skip
        assert len(changed) == 1, changed


def test_passed_secrets_are_redacted_from_the_raw_log(tmp_path, monkeypatch):
    from ringflow.search.session import _redact

    monkeypatch.setenv("AGENT_API_KEY", "sk-very-secret-123")
    (tmp_path / "stdout.log").write_text("using key sk-very-secret-123 now\n")
    (tmp_path / "stderr.log").write_text("auth: sk-very-secret-123\n")
    _redact(tmp_path, ["AGENT_API_KEY", "UNSET_NAME"])
    for name in ("stdout.log", "stderr.log"):
        text = (tmp_path / name).read_text()
        assert "sk-very-secret-123" not in text and "[AGENT_API_KEY redacted]" in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stderr.log", "stdout.log"]


def test_the_operator_is_the_program_the_command_runs_unquoted():
    from types import SimpleNamespace

    from ringflow.carryover.engineer import operator

    def ring(command):
        return SimpleNamespace(config=SimpleNamespace(engineer=SimpleNamespace(command=command)))

    assert operator(ring('"$RINGFLOW_PYTHON" /tools/agent.py --fast')) == "$RINGFLOW_PYTHON"
    assert operator(ring("sh /tools/engineer.sh")) == "sh"
    assert operator(ring("builtin")) == "builtin" and operator(ring(None)) is None
