# Configuration, paths and the input functions every stage shares. No rules here.

import sys
from pathlib import Path

from snakemake.utils import validate

from ringflow.selection.final import (
    after_decision_final_runs,
    choose,
    ends_selection,
    guard_views,
    guarded_before,
    review_variants,
    trained_finalists,
    usable_baseline,
)
from ringflow.jsonio import read_json_cached as read_json
from ringflow.ring.layout import NODE_PATTERN, VARIANT_PATTERN, VIEW_PATTERN, RingLayout
from ringflow.ring.clock import view_limits
from ringflow.ring.hooks import refuse_locked
from ringflow.ring.named import CHAIN_PARENT_KEY
from ringflow.sandbox.slots import gpu_slots
from ringflow.carryover.rescoring import rescore_rank
from ringflow.carryover.scores import imported_score

# The Snakefile gives this ring its whole configuration, checked (and taken from the ring it
# continues where left at a default), and the ring of the chain it waits for, if any;
# validation here fills in the defaults.
CHAIN_PARENT = config.pop(CHAIN_PARENT_KEY, None)
validate(config, "../config/config.schema.yaml")

RING = RingLayout(Path(config["runs_dir"]) / config["ring_id"])
# Rules call the package with the interpreter Snakemake runs under, whatever PATH says.
RINGFLOW = f"{sys.executable} -m ringflow"

# profiles/gpu declares the `gpu` resource: then one slot per GPU this machine has (SLURM
# jobs bring their own allocation), so as many executions run at once as there are GPUs.
GPU_SLOTS = gpu_slots(workflow.global_resources)


wildcard_constraints:
    node=NODE_PATTERN,
    view=VIEW_PATTERN,
    variant=VARIANT_PATTERN,
    key="[0-9a-f]{64}",
    rank=r"\d+",
    g=r"\d+",


def path(p):
    return str(p)


def chain_parent_inputs(*names):
    """The files of the ring of the chain this one waits for (none for other rings); ancient,
    so that the finished parent never makes this ring's lock or import run again."""
    if CHAIN_PARENT is None:
        return []
    parent = RingLayout(Path(CHAIN_PARENT))
    return [ancient(path(getattr(parent, name))) for name in names]


def log_for(rule, name):
    return str(RING.root / "logs" / rule / f"{name}.log")


# ---- the ring and its nodes -------------------------------------------------------------

REFUSALS_CHECKED = []
DEFAULTS = workflow.source_path("../config/config.yaml")


def check_refusals():
    """Once, when the DAG first reaches this locked ring: refuse it under a changed
    configuration, with edited inputs or continuing another task (ring/hooks.py)."""
    if not REFUSALS_CHECKED and workflow.is_main_process:
        if refuse_locked(RING.root, config, DEFAULTS):
            REFUSALS_CHECKED.append(True)


def ring_lock():
    """RING.json; input functions that need it wait for the import checkpoint."""
    check_refusals()
    checkpoints.import_nodes.get()
    return read_json(RING.ring_json)


def nodes_index():
    """The imported nodes; waits for the import checkpoint."""
    check_refusals()
    return read_json(checkpoints.import_nodes.get().output.index)


def node_record(node):
    nodes_index()
    return read_json(RING.node_json(node))


def ready_nodes(role=None):
    """Ready nodes searched in this ring (imported scored nodes are not: see rescores)."""
    return [
        n["id"]
        for n in nodes_index()["nodes"]
        if n["status"] == "ready"
        and (role is None or n["role"] == role)
        and not n.get("imported")
    ]


def rescore_nodes():
    """Imported nodes this ring re-executes on seed 0 (SPEC 12: not comparable)."""
    return [
        n["id"]
        for n in nodes_index()["nodes"]
        if n["status"] == "ready" and n.get("rescore")
    ]


def baseline_node():
    return usable_baseline(nodes_index())


def score_files(nodes, variants, views=None):
    views = views or ring_lock()["search_views"]
    return [
        path(RING.score(node, view, variant))
        for node in nodes
        for view in views
        for variant in variants
    ]


# ---- executions -------------------------------------------------------------------------


def execution_inputs(wildcards):
    """A replayer takes its key's target as input, so weight reuse is target existence.

    The input is `ancient`: re-running a trainer (say, after its result.json was deleted)
    re-creates the key target without re-running every replay of the key. node.json is
    not declared: reading it here already waits for the import checkpoint, and the
    scheduler stats every input of every ready job on each pass.
    """
    node = node_record(wildcards.node)
    spec = node["executions"][wildcards.view][wildcards.variant]
    inputs = {}
    key = spec.get("key")
    if key:
        owner = nodes_index()["keys"][key]
        me = [wildcards.node, wildcards.view, wildcards.variant]
        if owner["in_store"] or owner["trainer"] != me:
            inputs["key"] = ancient(path(RING.key_target(key)))
    return inputs


def key_target_inputs(wildcards):
    owner = nodes_index()["keys"][wildcards.key]
    if owner["in_store"]:
        return {}
    return {"trainer": path(RING.result(*owner["trainer"]))}


def execution_priority(wildcards):
    """Resumed work first (SPEC 11.3), then seed 0 on the first search view, so every node
    gets a first score early."""
    lock = ring_lock()
    if resume_rank(wildcards.node) is not None:
        return 1000 - resume_rank(wildcards.node)
    rescore = rescore_rank(RING.root, node_record(wildcards.node))
    if rescore is not None and wildcards.variant == "s0":
        return 500 - rescore
    if wildcards.variant == "s0" and wildcards.view == lock["search_views"][0]:
        return 100
    if wildcards.variant == "s0":
        return 50
    return 10


def resume_rank(node):
    """A resume node's place in the resume queue (oldest seal first), None for other nodes."""
    origin = node_record(node).get("origin") or {}
    if origin.get("kind") != "resume":
        return None
    queue = read_json(RING.carryover_imported)["queue"]
    return (
        queue.index(origin["identity"]) if origin["identity"] in queue else len(queue)
    )


def execution_limits(wildcards):
    """The limits of the execution's view (limits, with its limits_per_view entry over it)."""
    return view_limits(ring_lock(), wildcards.view)


def execution_threads(wildcards):
    return execution_limits(wildcards)["threads"]


def execution_gpus(wildcards):
    """GPUs per execution where the profile declares GPU slots (profiles/gpu), else none."""
    return config["gpus_per_execution"] if GPU_SLOTS else 0


def execution_mem_mb(wildcards):
    """What the execution may use (its view's memory_gb), plus room for the supervisor."""
    return int(execution_limits(wildcards)["memory_gb"] * 1024) + 512


def execution_runtime(wildcards):
    """Minutes a scheduler must allow: the view's time limit, the grace, and scoring."""
    config = ring_lock()["config"]
    grace_min = config["exec_health"]["term_grace_s"] / 60
    return (
        int(
            execution_limits(wildcards)["time_limit_min"]
            + grace_min
            + config["scorer_timeout_min"]
        )
        + 1
    )


# ---- search, promotion and final selection ------------------------------------------------


def search_inputs(wildcards):
    candidates = ready_nodes("candidate")
    baseline = [b for b in [baseline_node()] if b]
    static = score_files(candidates, ["s0", "s0-ablate"]) + score_files(
        baseline + rescore_nodes(), ["s0"]
    )
    return static + [path(RING.search_loop)]


# ---- the search loop: generations of engineered nodes (rules/search.smk) ------------------


def generations():
    """Every generation's plan up to the last one, walking the checkpoints."""
    plans, g = [], 0
    while True:
        plans.append(
            read_json(checkpoints.search_generation.get(g=g).output.generation)
        )
        if plans[-1]["last"]:
            return plans
        g += 1


def ready_in_generation(g):
    """The nodes of generation g that were submitted (once all its sessions have ended)."""
    settled = read_json(checkpoints.settle_generation.get(g=g).output.settled)
    return [node for node, status in settled["nodes"].items() if status == "ready"]


def generation_inputs(wildcards):
    """Generation g starts once g-1's nodes are settled and scored (seed 0); the first
    once the static candidates are, so that parents are drawn among scored nodes. Resumed
    engineer work is generation 0 and starts at once; generation 1 then waits for the
    static candidates too."""
    g = int(wildcards.g)
    first = 1 if resumes_engineer_work() else 0
    searched = ready_nodes("candidate") + rescore_nodes()
    inputs = score_files(searched, ["s0"]) if g == first else []
    if g > 0:
        inputs += [path(RING.settled(g - 1))]
        inputs += score_files(ready_in_generation(g - 1), ["s0"])
    return inputs


def resumes_engineer_work():
    """Whether this ring resumes engineer work (its resume queue, fixed at import)."""
    nodes_index()
    if not RING.carryover_imported.exists():
        return False  # a ring whose nodes were imported without the carryover step
    imported = read_json(RING.carryover_imported)
    kinds = {item["identity"]: item["kind"] for item in imported["imported"]}
    return any(kinds.get(identity) == "engineer" for identity in imported["queue"])


def session_priority(wildcards):
    """Resumed engineer work before new work (SPEC 11.3): its generation and sessions."""
    if "g" in wildcards.keys():
        return 1500 if wildcards.g == "0" and resumes_engineer_work() else 0
    return 1500 if resume_rank(wildcards.node) is not None else 0


def settle_inputs(wildcards):
    """Every session of generation g (all of them start at once)."""
    plan = read_json(checkpoints.search_generation.get(g=wildcards.g).output.generation)
    return [path(RING.session(node)) for node in plan["nodes"]]


def engineer_inputs(wildcards):
    node = read_json(RING.node_json(wildcards.node))
    return [ancient(path(RING.generation(node["origin"]["generation"])))]


def search_loop_inputs(wildcards):
    plans = generations()
    inputs = [path(RING.generation(plans[-1]["generation"]))]
    for plan in plans[:-1]:
        ready = ready_in_generation(plan["generation"])
        inputs += [path(RING.settled(plan["generation"]))]
        inputs += score_files(ready, ["s0", "s0-ablate"])
    return inputs


def promoted_inputs(wildcards):
    promoted = read_json(checkpoints.promote.get().output.promotion)["promoted"]
    lock = ring_lock()
    return [
        path(RING.score(node, view, variant))
        for node in promoted
        for view in lock["search_views"]
        for variant in ["s1", "s2"]
        # A comparable imported promotion score stands in for this ring's run (SPEC 12).
        if not imported_score(RING, node, view, variant, lock["search_hash"])
    ]


def finalists():
    return read_json(checkpoints.rank.get().output.ranking)["finalists"]


def screen_inputs(wildcards):
    """The view-blind check's screen: seed 0 on the first search view and two disguised
    copies."""
    view = ring_lock()["search_views"][0]
    variants = ["s0", "blind-s0", "blind2-s0"]
    return [path(RING.seated)] + score_files([wildcards.node], variants, [view])


def review_inputs(wildcards):
    """The screen, and the further runs it asked for (review_variants)."""
    view = ring_lock()["search_views"][0]
    screen = read_json(checkpoints.screen.get(node=wildcards.node).output.screen)
    extra = score_files([wildcards.node], review_variants(screen), [view])
    return [path(RING.screen(wildcards.node))] + extra


def guard_variants():
    return [f"g{seed}" for seed in ring_lock()["guard_seeds"]]


def verdict_inputs(wildcards):
    node = finalists()[int(wildcards.rank) - 1]
    review = read_json(checkpoints.review.get(node=node).output.review)
    inputs = [path(RING.review(node))]
    if review["passed"] and guarded_before(ring_lock(), node) is None:
        sides = [node, baseline_node()]
        inputs += score_files(sides, guard_variants(), guard_views(ring_lock()))
    return inputs


def verdict_ranks():
    """Finalists in rank order until one replaces the baseline or its guard is incomplete."""
    lock = ring_lock()
    if not lock["config"]["guard"]["enabled"] or baseline_node() is None:
        return []
    ranks = []
    for rank in range(1, len(finalists()) + 1):
        ranks.append(rank)
        if ends_selection(read_json(checkpoints.verdict.get(rank=rank).output.verdict)):
            break
    return ranks


def decision_inputs(wildcards):
    seated = read_json(checkpoints.seat_baseline.get().output.seated)
    if seated["refused"]:
        return [path(RING.seated)]
    ranks = verdict_ranks()
    verdicts = [read_json(RING.verdict(rank)) for rank in ranks]
    ranking = read_json(checkpoints.rank.get().output.ranking)
    chosen, _, _ = choose(ring_lock(), seated, ranking, verdicts)
    sides = sorted({node for node in (chosen, seated["baseline"]) if node})
    inputs = [path(RING.seated), path(RING.ranking)] + [
        path(RING.verdict(r)) for r in ranks
    ]
    return inputs + score_files(sides, ["s0"], [ring_lock()["final_view"]])


def repro_inputs(wildcards):
    """After the decision, never before it, and nothing after a refusal: the trained
    finalists' cold retrain and the other guarded finalists' final-view runs."""
    decision = read_json(checkpoints.decide.get().output.decision)
    if decision["decision"] in ("refused", "none"):
        # The seed-0 ranking is still written (it runs nothing); no promotion seeds start.
        return [path(RING.decision), path(RING.promotion)]
    nodes = trained_finalists(RING.root, finalists())
    view = [ring_lock()["search_views"][0]]
    others = after_decision_final_runs(decision)
    return (
        [path(RING.decision)]
        + score_files(nodes, ["s0", "fresh-s0"], view)
        + score_files(others, ["s0"], [ring_lock()["final_view"]])
    )
