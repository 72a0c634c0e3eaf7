"""What a continuing ring imports of its parent's scored work, and when those scores are
comparable (docs/operations.md#chains): scored nodes, promotion scores, refuted directions,
rescoring obligations; never a guard- or final-view score.

The parent's executions here are score records as a ring writes them (result.json and
score.json); the rings that run them for real are in test_comparability_e2e.py.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from test_carryover_import import continuing

from carrytools import cut_before_start
from ringflow.carryover.importing import import_carryover
from ringflow.carryover.manifest import write_stop_manifest
from ringflow.carryover.rescoring import choose_rescores, obligations
from ringflow.carryover.scores import HISTORY, comparable, refuted_among, s0_mean
from ringflow.core.clock import load_ring
from ringflow.core.layout import RingLayout
from ringflow.core.node_state import Node
from ringflow.core.records import write_record
from ringflow.core.state import Ring
from ringflow.nodes import import_static
from ringflow.reporting.progress import snapshot
from ringflow.ring.lock import lock_ring
from ringflow.search.instructions import context, refuted_directions, render
from ringflow.search.plan import own_nodes, parent_scores
from ringflow.selection.promote import node_mean, promote
from ringflow.selection.timekeeper import Planner
from ringtools import full_config, locked_ring, make_candidate

VIEWS = ("proxy", "x3")
MEANS = {"alpha": 0.9, "beta": 0.7, "gamma": 0.5, "delta": 0.3}


def read(path: Path):
    return json.loads(path.read_text())


def record_run(ring: Path, node: str, view: str, variant: str, score: float | None) -> None:
    """An execution's records as a ring writes them (hashed into its ledger): ok and
    scored, or crashed."""
    folder = ring / "nodes" / node / "exec" / view / variant
    ok = score is not None
    write_record(ring, folder / "result.json", {"status": "ok" if ok else "crash",
                                                "budget_cut": False})  # fmt: skip
    write_record(ring, folder / "score.json", {"score": score, "valid": ok, "scored": ok,
                                               "reason": "" if ok else "not scored"})  # fmt: skip


def scored_parent(work: Path, means=MEANS, **overrides) -> Path:
    """Ring a: one candidate per mean, each scored on seed 0 on both search views."""
    cands = work / "cands"
    for name, mean in means.items():
        make_candidate(cands / name, mean=mean, label=name)
    ring = locked_ring(work, cands, "a", **overrides)
    for node in nodes_of(ring):
        mean = means[read(ring / "nodes" / node / "node.json")["name"]]
        for view in VIEWS:
            record_run(ring, node, view, "s0", mean)
    return ring


def nodes_of(ring: Path) -> list[str]:
    return [n["id"] for n in read(ring / "nodes" / "index.json")["nodes"]]


def continued(work: Path, parent: Path, ring_id: str = "b", **overrides) -> tuple[Path, dict]:
    ring = continuing(work, parent, ring_id, **overrides)
    done = import_carryover(ring)
    import_static(load_ring(ring))
    return ring, done


def by_name(ring: Path) -> dict[str, dict]:
    out = {}
    for entry in read(ring / "nodes" / "index.json")["nodes"]:
        node = read(ring / "nodes" / entry["id"] / "node.json")
        out[node["name"]] = {**node, "index": entry}
    return out


def test_unchanged_spec_imports_comparable_scores_used_for_parents_and_promotion(tmp_path):
    a = scored_parent(tmp_path)
    b, done = continued(tmp_path, a)
    ring_b = load_ring(b)
    assert ring_b.search_hash == load_ring(a).search_hash
    assert done["comparability"]["comparable"] is True
    assert done["rescore"] == []
    nodes = by_name(b)
    assert sorted(nodes) == sorted(MEANS)  # the candidates folder's twins are these nodes
    layout = RingLayout(b)
    for name, node in nodes.items():
        assert node["origin"]["kind"] == "imported" and node["status"] == "ready"
        assert node["index"]["imported"] is True and node["index"]["rescore"] is False
        assert node["imported"]["identity"] == f"a#{node['origin']['node']}"
        assert node["imported"]["comparable"] is True
        # The submission is copied into this ring, the same tree as scored.
        assert (b / "nodes" / node["id"] / "solution" / "run.py").is_file()
        assert (
            node["tree_hash"]
            == read(a / "nodes" / node["origin"]["node"] / "node.json")["tree_hash"]
        )
        record = node["imported"]["scores"]["proxy"]["s0"]
        assert (record["ring"], record["node"]) == ("a", node["origin"]["node"])
        assert node_mean(ring_b, layout, node["id"], "s0")["mean"] == MEANS[name]
        assert not (b / "nodes" / node["id"] / "exec").exists()
    events = [json.loads(line) for line in (b / "events.jsonl").read_text().splitlines()]
    assert sum(e["kind"] == "candidate_imported" for e in events) == len(MEANS)
    # b's candidates folder holds them: they count against search.max_nodes.
    assert all(node["index"]["candidate"] for node in nodes.values())
    assert own_nodes(read(b / "nodes" / "index.json")) == len(MEANS)
    # Parents for the search and candidates for promotion, ranked by their imported score.
    index = read(b / "nodes" / "index.json")
    assert sorted(parent_scores(ring_b, layout, index).values()) == sorted(MEANS.values())
    promotion = promote(b)
    assert promotion["promoted"] == [nodes[n]["id"] for n in ("alpha", "beta", "gamma")]
    ledger = [json.loads(line) for line in (b / "ledger.jsonl").read_text().splitlines()]
    (line,) = [r for r in ledger if r["kind"] == "scores_imported"]
    assert line["comparable"] is True and line["rescore"] == []
    # The progress line's best so far counts them as the ranking does.
    assert snapshot(b)["best"] == (nodes["alpha"]["id"], MEANS["alpha"])


def test_changed_spec_makes_scores_history_and_rescores_only_the_top_k(tmp_path):
    a = scored_parent(tmp_path)
    # Another time limit is another evaluation spec (limits are part of the search hash).
    b, done = continued(tmp_path, a, continue_rescore_top_k=2,
                        limits={"memory_gb": 4, "time_limit_min": 9, "threads": 1})  # fmt: skip
    ring_b = load_ring(b)
    assert ring_b.search_hash != load_ring(a).search_hash
    assert done["comparability"]["comparable"] is False
    nodes = by_name(b)
    ids = {name: node["imported"]["identity"] for name, node in nodes.items()}
    assert done["rescore"] == [ids["alpha"], ids["beta"]]  # best old score first
    layout = RingLayout(b)
    for name, node in nodes.items():
        rescored = name in ("alpha", "beta")
        assert node["imported"]["comparable"] is False
        assert node["index"]["rescore"] is rescored
        assert node["status"] == ("ready" if rescored else HISTORY)
        assert bool(node["executions"]) is rescored  # history is never executed
        # Kept for the record, never ranked against this ring's scores.
        assert node["imported"]["scores"]["proxy"]["s0"]["score"] == MEANS[name]
        assert node_mean(ring_b, layout, node["id"], "s0")["mean"] is None
    assert parent_scores(ring_b, layout, read(b / "nodes" / "index.json")) == {}
    assert snapshot(b)["best"] is None  # history is no best so far either
    promotion = promote(b)
    assert promotion["promoted"] == []


def test_the_environment_key_is_part_of_the_search_hash(tmp_path):
    a = scored_parent(tmp_path)
    # The same ring run with another candidates' interpreter (ringflow's own, with other
    # packages installed): another environment, nothing else changed.
    config = full_config(ring_id="b", continue_from="runs/a", task="", candidates="",
                         baseline="", program={"python": sys.executable})  # fmt: skip
    b = Path(lock_ring(config, tmp_path).ring_dir)
    lock_a, lock_b = load_ring(a), load_ring(b)
    assert lock_a.env_key != lock_b.env_key
    differ = {k for k in lock_a.evaluation if lock_a.evaluation[k] != lock_b.evaluation[k]}
    assert differ == {"env_keys"}
    assert lock_a.search_hash != lock_b.search_hash


def test_guard_and_final_view_scores_are_never_imported(tmp_path):
    a = scored_parent(tmp_path)
    node = nodes_of(a)[0]
    record_run(a, node, "final", "s0", 0.99)  # the final view
    record_run(a, node, "proxy", "g3", 0.99)  # a guard seed (no guard view: on search rows)
    for view in VIEWS:  # promotion seeds are imported
        record_run(a, node, view, "s1", 0.8)
        record_run(a, node, view, "s2", 0.85)
    b, done = continued(tmp_path, a)
    for entry in done["scored"]:
        assert set(entry["scores"]) <= set(VIEWS)
        for variants in entry["scores"].values():
            assert set(variants) <= {"s0", "s1", "s2"}
    imported = next(n for n in by_name(b).values() if n["origin"]["node"] == node)
    assert set(imported["imported"]["scores"]["proxy"]) == {"s0", "s1", "s2"}
    ring_b, layout = load_ring(b), RingLayout(b)
    assert node_mean(ring_b, layout, imported["id"], "s1")["mean"] == 0.8
    assert node_mean(ring_b, layout, imported["id"], "s2")["mean"] == 0.85
    # The final reserve does not price promotion seeds an imported score stands in for.
    planner = Planner(ring_b, layout)
    assert not planner.pending(imported["id"], "proxy", "s1")
    other = next(n for n in by_name(b).values() if n["id"] != imported["id"])
    assert planner.pending(other["id"], "proxy", "s1")


def test_a_guard_view_here_is_dropped_from_imported_scores(tmp_path):
    a = scored_parent(tmp_path)
    # b declares x3 a guard view: no score on it may exist before its final selection.
    _, done = continued(tmp_path, a, views={"search": ["proxy"], "guard": ["x3"],
                                            "final": "final"})  # fmt: skip
    assert done["scored"] and all(set(e["scores"]) == {"proxy"} for e in done["scored"])
    assert done["comparability"]["comparable"] is False  # other search views: other spec


def test_refuted_directions_include_imported_ones(tmp_path):
    a = scored_parent(tmp_path)
    ids = {read(a / "nodes" / n / "node.json")["name"]: n for n in nodes_of(a)}
    # delta was an improvement of alpha that scored worse: a refuted direction.
    path = a / "nodes" / ids["delta"] / "node.json"
    write_record(a, path, {**read(path), "parent": ids["alpha"]})
    (a / "nodes" / ids["delta"] / "solution").chmod(0o755)
    b, _ = continued(tmp_path, a, limits={"memory_gb": 4, "time_limit_min": 9, "threads": 1},
                     continue_rescore_top_k=1)  # fmt: skip
    nodes = by_name(b)
    assert nodes["delta"]["status"] == HISTORY and nodes["delta"]["parent"] == nodes["alpha"]["id"]
    ring_b, layout = load_ring(b), RingLayout(b)
    refuted = refuted_directions(ring_b, layout, read(b / "nodes" / "index.json"))
    (item,) = refuted
    assert item["node"] == nodes["delta"]["id"] and item["parent"] == nodes["alpha"]["id"]
    assert (item["score"], item["parent_score"]) == (MEANS["delta"], MEANS["alpha"])
    assert item["ring"] == "a" and item["comparable"] is False
    # The engineers read it in their instructions.
    draft = Node.from_record({"id": "n999-draft-g0", "origin": {"kind": "draft"}, "parent": None})
    text = render(context(ring_b, layout, draft, time.time()))
    assert f"refuted {nodes['delta']['id']}: {MEANS['delta']}" in text


def test_a_submission_changed_since_it_was_scored_is_rejected(tmp_path):
    a = scored_parent(tmp_path, means={"alpha": 0.9})
    (node,) = nodes_of(a)
    run_py = a / "nodes" / node / "solution" / "run.py"
    run_py.chmod(0o644)
    run_py.write_text(run_py.read_text() + "# edited\n")
    b, _ = continued(tmp_path, a)
    (entry,) = read(b / "nodes" / "index.json")["nodes"][:1]
    rejected = read(b / "nodes" / entry["id"] / "node.json")
    assert rejected["status"] == "rejected" and rejected["origin"]["kind"] == "imported"
    assert "changed since it was scored" in rejected["error"]
    # The candidates folder's own copy (unchanged) is then an ordinary node of this ring.
    static = [n for n in read(b / "nodes" / "index.json")["nodes"] if not n.get("imported")]
    assert [n["status"] for n in static] == ["ready"]


def test_a_rescore_cut_by_the_cutoff_is_an_obligation_the_next_ring_inherits(tmp_path):
    a = scored_parent(tmp_path)
    changed = {"memory_gb": 4, "time_limit_min": 9, "threads": 1}
    b, _ = continued(tmp_path, a, limits=changed, continue_rescore_top_k=1)
    (rescore,) = [n for n in by_name(b).values() if n["index"]["rescore"]]
    assert rescore["name"] == "alpha"
    # Its seed-0 run is cut by the cutoff before it starts (a real execution).
    result = cut_before_start(b, rescore["id"], "proxy")
    assert result["status"] == "interrupted" and result["budget_cut"]
    (owed,) = obligations(b)
    assert owed["identity"] == rescore["imported"]["identity"] and "proxy" in owed["views"]
    manifest = write_stop_manifest(b)
    assert [o["identity"] for o in manifest["rescore_obligations"]] == [owed["identity"]]
    # Ring c: b's spec, no top-k of its own; the obligation is re-executed all the same.
    c, done_c = continued(tmp_path, b, "c", limits=changed, continue_rescore_top_k=0)
    assert load_ring(c).search_hash == load_ring(b).search_hash
    assert done_c["obligations_inherited"] == [owed["identity"]]
    assert done_c["rescore"] == [owed["identity"]]
    nodes_c = by_name(c)
    assert nodes_c["alpha"]["index"]["rescore"] is True and nodes_c["alpha"]["status"] == "ready"
    # The old (non-comparable) score travels with it, from where it was made.
    assert nodes_c["alpha"]["imported"]["scores"]["proxy"]["s0"]["ring"] == "a"
    assert nodes_c["alpha"]["imported"]["via"] == [owed["identity"], f"b#{rescore['id']}"]
    for name in ("beta", "gamma", "delta"):
        assert nodes_c[name]["status"] == HISTORY


def test_choose_rescores_obligations_first_then_best_old_scores():
    def entry(ident, mean, comparable=False):
        return {"identity": ident, "old_mean": mean, "comparable": comparable}

    entries = [entry("a#1", 0.2), entry("a#2", 0.9), entry("a#3", 0.5), entry("a#4", 0.9),
               entry("a#5", 0.1, comparable=True)]  # fmt: skip
    assert choose_rescores(entries, [], False, 2, "maximize") == ["a#2", "a#4"]
    assert choose_rescores(entries, [], False, 2, "minimize") == ["a#1", "a#3"]
    assert choose_rescores(entries, ["a#1"], False, 2, "maximize") == ["a#1", "a#2", "a#4"]
    # The parent's spec is this ring's: nothing but inherited obligations.
    assert choose_rescores(entries, ["a#3"], True, 2, "maximize") == ["a#3"]
    # A comparable node is never re-executed, obligation or not.
    assert choose_rescores(entries, ["a#5"], True, 2, "maximize") == []
    assert choose_rescores(entries, [], False, 0, "maximize") == []


def sheet(hash_: str, **means) -> dict:
    return {view: {"s0": {"score": mean, "valid": True, "scored": True, "search_hash": hash_}}
            for view, mean in means.items()}  # fmt: skip


def test_comparable_needs_every_search_view_under_this_search_hash():
    ring = Ring.from_record(
        {
            "ring_id": "b",
            "ring_dir": "/runs/b",
            "search_views": ["proxy", "x3"],
            "search_hash": "h1",
        }
    )
    assert comparable(ring, sheet("h1", proxy=0.5, x3=0.6))
    assert not comparable(ring, sheet("h1", proxy=0.5))  # a search view without a score
    assert not comparable(ring, {**sheet("h1", proxy=0.5), **sheet("h0", x3=0.6)})
    assert s0_mean(sheet("h0", proxy=0.5, x3=0.7)) == 0.6
    invalid = sheet("h1", proxy=0.5, x3=0.7)
    invalid["x3"]["s0"]["valid"] = False
    assert s0_mean(invalid) is None  # invalid output has no score, never a number


def test_refuted_among_compares_a_node_with_its_parent_under_one_spec_only():
    def entry(node, parent, mean, hash_="h1"):
        scores = sheet(hash_, proxy=mean)
        return {"identity": f"a#{node}", "ring_id": "a", "node": node, "parent": parent,
                "old_mean": mean, "views": ["proxy"], "scores": scores}  # fmt: skip

    entries = [entry("n1", None, 0.8), entry("n2", "n1", 0.6), entry("n3", "n1", 0.9),
               entry("n4", "n1", 0.1, hash_="h0")]  # fmt: skip
    refuted = refuted_among(entries, "maximize")
    assert set(refuted) == {"a#n2"}  # n3 improved; n4 was scored under another spec
    assert refuted["a#n2"]["parent_identity"] == "a#n1"
    assert (refuted["a#n2"]["score"], refuted["a#n2"]["parent_score"]) == (0.6, 0.8)
    assert set(refuted_among(entries, "minimize")) == {"a#n3"}


def test_imported_nodes_a_candidates_folder_does_not_hold_are_not_counted_as_new_work(tmp_path):
    scored_parent(tmp_path)  # ring a
    (tmp_path / "empty").mkdir()
    config = full_config(ring_id="b", continue_from="runs/a", task="", baseline="",
                         candidates=str(tmp_path / "empty"))  # fmt: skip
    b = Path(lock_ring(config, tmp_path).ring_dir)
    done = import_carryover(b)
    import_static(load_ring(b))
    index = read(b / "nodes" / "index.json")
    assert len(index["nodes"]) == len(MEANS) and len(done["scored"]) == len(MEANS)
    assert not any(entry["candidate"] for entry in index["nodes"])
    assert own_nodes(index) == 0  # the search may still write search.max_nodes nodes
