"""The DAG of one ring: what each stage of rules/*.smk waits for, as tested Python.

Two rules keep a finished ring finished and a killed ring exact:

- **Input lists are functions of records that were complete before the step ran**
  (checkpoint outputs, the import's frozen `nodes/static.json`), never of what came later:
  the first generation once named the nodes it had planned itself, so a finished ring
  looked out of date and planned its search again. Records are frozen once written, so
  their times agree with the order they were made in.
- **Checkpoints are reached in ring order.** Snakemake learns that a completed checkpoint
  is complete only for the checkpoints of jobs already in its DAG, one level a round: a
  rule that reached `rank` before `promote` was known complete would be scheduled without
  the promotion runs it needs (a killed ring resumed that way decided on missing scores).
  So every input function walks the checkpoints from the first in the order a ring reaches
  them (`CHECKPOINT_OUTPUTS`), up to the one it needs, and each round completes one more.

Inputs are `ancient` only where the file's age must not matter and its producer is never
running while the DAG is updated (a generation's plan, and a file that already exists
when its consumer enters the DAG: a key target, the lock, the records after the decision,
a chain parent's records; `once_made`): Snakemake skips an ancient input that
exists when it propagates what must run. When a checkpoint completes (of this ring, or
of another ring of the same invocation) while the producer of an ancient input runs and
has already written it, Snakemake drops the job that takes it and every step after it,
and ends with exit 0 as if the ring were done.

The rules call the methods of `RingDag`; `FolderCheckpoints` runs the same methods over a
ring folder, as the tests do (docs/architecture.md#the-workflow-glue).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from snakemake.io import ancient

from ..carryover.rescoring import rescore_rank
from ..carryover.scores import imported_score
from ..cluster.slurm import (
    Request,
    execution_request,
    job_time_limit_min,
    session_time_limit_min,
)
from ..core import statuses
from ..core.clock import deadline_for, handover_at, view_limits
from ..core.errors import InputError
from ..core.jsonio import read_json_cached as read_json
from ..core.layout import RingLayout, is_guard_variant, is_review_variant
from ..core.node_state import Node
from ..core.settings import RingConfig
from ..core.state import Ring
from ..selection.final import (
    after_decision_final_runs,
    guard_views,
    guarded_before,
    reference_node,
    review_variants,
    trained_finalists,
)
from ..selection.order import choose, ends_selection, usable_baseline
from ..selection.power import probe_variants
from .checkpoints import Checkpoints


def _paths(paths) -> list[str]:
    return [str(p) for p in paths]


def _ancient(paths) -> list[str]:
    return [ancient(str(p)) for p in paths]


def _once_made(path: Path) -> str:
    """Ancient if the file exists, else plain: its job may still be running when a
    checkpoint completes (see the module's docstring)."""
    return ancient(str(path)) if path.exists() else str(path)


class RingDag:
    """The input functions, priorities and resources of one ring's rules."""

    def __init__(
        self,
        layout: RingLayout,
        config: Mapping[str, Any],
        checkpoints: Checkpoints,
        chain_parent: str | None = None,
        gpu_slots: int = 0,
        refuse: Callable[[], bool] | None = None,
    ) -> None:
        self.ring = layout
        # Snakemake's validated configuration of the ring, read once.
        self.config = RingConfig.from_mapping(config)
        self.checkpoints = checkpoints
        self.chain_parent = chain_parent
        self.gpu_slots = gpu_slots
        self._refuse = refuse
        self._refused_checked = False
        self._locked: tuple[tuple[int, int, int], Ring, dict] | None = None
        self._nodes: dict[str, tuple[dict, Node]] = {}

    # ---- paths the rules declare ------------------------------------------------------

    def log(self, rule: str, name: str) -> str:
        return str(self.ring.root / "logs" / rule / f"{name}.log")

    def once_made(self, **names: str) -> Callable[[Any], dict[str, str]]:
        """An input function for the steps after the decision: each of the ring's files
        `names` (input name: layout attribute) is ancient once it exists, so that a user's
        own `ringflow report` or `summary` of a finished ring never makes it look out of
        date; before, it is a plain input, because its job may still be running when a
        checkpoint completes (of another ring of the same invocation: see the module's
        docstring)."""

        def inputs(_wildcards) -> dict[str, str]:
            return {name: _once_made(getattr(self.ring, attr)) for name, attr in names.items()}

        return inputs

    def chain_parent_inputs(self, *names: str) -> list[str]:
        """Files of the ring of the chain this one waits for (none for other rings); ancient
        once made, so that the finished parent never makes this ring's lock or import run
        again."""
        if self.chain_parent is None:
            return []
        parent = RingLayout(Path(self.chain_parent))
        return [_once_made(getattr(parent, name)) for name in names]

    # ---- the checkpoints, in ring order -----------------------------------------------

    def _checked(self) -> None:
        """Once, when the DAG first reaches this ring: its refusals (a locked ring under
        another configuration, edited inputs, another task)."""
        if not self._refused_checked and self._refuse is not None:
            # False while the ring is not locked yet: the lock itself checks a new ring.
            self._refused_checked = bool(self._refuse())

    def imported(self) -> dict:
        """The nodes the import made (frozen), after the lock and the carryover import."""
        self._checked()
        if self.ring.carryover_imported.exists() or not self.ring.nodes_static.exists():
            # (a ring whose nodes were imported without the carryover step has none to wait
            # for: a priority or resource function must not be left waiting)
            self.checkpoints.output("import_carryover")
        return read_json(self.checkpoints.output("import_nodes"))

    def lock(self) -> Ring:
        """The locked ring, parsed once per version of RING.json: the priority, thread and
        resource functions ask for it several times for every job."""
        self.imported()
        st = os.stat(self.ring.ring_json)
        version = (st.st_ino, st.st_mtime_ns, st.st_size)
        if self._locked is None or self._locked[0] != version:
            ring = Ring.from_record(read_json(self.ring.ring_json), source=self.ring.ring_json)
            self._locked = (version, ring, ring.config.to_mapping())
        return self._locked[1]

    def locked_config(self) -> dict:
        """The locked configuration as a mapping (what cluster/slurm.py reads), made once
        per version of RING.json rather than for every job."""
        self.lock()
        return self._locked[2]

    def generations(self, upto: int | None = None) -> list[dict]:
        """Each generation's plan with its settlement (None for the last), walked in order:
        plan g, settle g, plan g+1. With `upto`, generations 0..upto-1 only."""
        self.imported()
        walked, g = [], 0
        while upto is None or g < upto:
            plan = read_json(self.checkpoints.output("search_generation", g=g))
            if plan["last"]:
                walked.append({"plan": plan, "ready": []})
                break
            settled = read_json(self.checkpoints.output("settle_generation", g=g))
            ready = [node for node, status in settled["nodes"].items() if status == statuses.READY]
            walked.append({"plan": plan, "ready": ready})
            g += 1
        return walked

    def seated(self) -> dict:
        """The baseline in final/ (seated as soon as the search has ended, beside
        promotion, so that final/ holds it before any finalist is reviewed)."""
        self.imported()
        return read_json(self.checkpoints.output("seat_baseline"))

    def promotion(self) -> dict:
        self.seated()
        return read_json(self.checkpoints.output("promote"))

    def ranking(self) -> dict:
        self.promotion()
        return read_json(self.checkpoints.output("rank"))

    def finalists(self) -> list[str]:
        return self.ranking()["finalists"]

    def screen(self, node: str) -> dict:
        return read_json(self.checkpoints.output("screen", node=node))

    def review(self, node: str) -> dict:
        """A finalist's review, after the view-blind check's first screen."""
        self.screen(node)
        return read_json(self.checkpoints.output("review", node=node))

    def verdicts(self, upto: int | None = None) -> list[dict]:
        """Verdicts in rank order (each finalist's review before its verdict) until one ends
        selection; with `upto`, the verdicts before that rank, and its review."""
        if not self.guard_on():
            return []
        finalists = self.finalists()
        verdicts = []
        last = len(finalists) if upto is None else min(upto, len(finalists))
        for rank in range(1, last + 1):
            # A program an earlier ring of the chain guarded on these rows is not guarded
            # again, so its view-blind review would decide nothing.
            if guarded_before(self.lock(), finalists[rank - 1]) is None:
                self.review(finalists[rank - 1])
            if upto is not None and rank == upto:
                break
            verdicts.append(read_json(self.checkpoints.output("verdict", rank=rank)))
            if ends_selection(verdicts[-1]):
                break
        return verdicts

    def decision(self) -> dict:
        self.verdicts()
        return read_json(self.checkpoints.output("decide"))

    # ---- the ring's nodes -------------------------------------------------------------

    def node(self, node: str) -> Node:
        """A node's record, parsed once per version of its node.json (read_json_cached
        gives the same object back while the file is unchanged)."""
        self.imported()
        path = self.ring.node_json(node)
        record = read_json(path)
        known = self._nodes.get(node)
        if known is None or known[0] is not record:
            known = self._nodes[node] = (record, Node.from_record(record, source=path))
        return known[1]

    def ready_static(self, role: str | None = None) -> list[str]:
        """Ready nodes the import made and this ring searches (imported scored nodes are
        not: see rescore_nodes)."""
        return [
            n["id"]
            for n in self.imported()["nodes"]
            if n["status"] == statuses.READY
            and (role is None or n["role"] == role)
            and not n.get("imported")
        ]

    def rescore_nodes(self) -> list[str]:
        """Imported nodes this ring re-executes on seed 0 (their scores are not comparable)."""
        return [
            n["id"]
            for n in self.imported()["nodes"]
            if n["status"] == statuses.READY and n.get("rescore")
        ]

    def baseline(self) -> str | None:
        return usable_baseline(self.imported())

    def guard_on(self) -> bool:
        return bool(self.lock().config.guard.enabled) and self.baseline() is not None

    def score_files(self, nodes, variants, views=None) -> list[str]:
        views = views or self.lock().search_views
        return _paths(
            self.ring.score(node, view, variant)
            for node in nodes
            for view in views
            for variant in variants
        )

    def _key_owner(self, key: str) -> dict:
        """A key's trainer: fixed at import for the imported nodes' keys, when its session
        settles for an engineered node's (the living index only ever adds keys)."""
        owners = self.imported()["keys"]
        if key not in owners:
            owners = read_json(self.ring.nodes_index)["keys"]
        return owners[key]

    # ---- executions -------------------------------------------------------------------

    def execution_inputs(self, wildcards) -> dict:
        """A replayer takes its key's target as input, so weight reuse is target existence.
        Once the target exists it is ancient, and its job has no input left that could run
        it again (`key_target_inputs`): a trainer run again (its result deleted) leaves the
        target and the key's replays alone. Before that it is a plain input, because its
        job may be running when a checkpoint completes (see the module's docstring)."""
        node = self.node(wildcards.node)
        spec = node.executions[wildcards.view][wildcards.variant]
        key = spec.get("key")
        if not key:
            return {}
        owner = self._key_owner(key)
        me = [wildcards.node, wildcards.view, wildcards.variant]
        if owner["in_store"] or owner["trainer"] != me:
            return {"key": _once_made(self.ring.key_target(key))}
        return {}

    def key_target_inputs(self, wildcards) -> dict:
        """The trainer's result, until the target exists: a made target is never made
        again by its trainer running again, which re-registers nothing new (the store holds
        the key, or the replayers train it themselves)."""
        owner = self._key_owner(wildcards.key)
        if owner["in_store"] or self.ring.key_target(wildcards.key).exists():
            return {}
        return {"trainer": str(self.ring.result(*owner["trainer"]))}

    def resume_rank(self, node: str) -> int | None:
        """A resume node's place in the resume queue (oldest seal first), None otherwise."""
        origin = self.node(node).origin or {}
        if origin.get("kind") != "resume":
            return None
        queue = read_json(self.ring.carryover_imported)["queue"]
        return queue.index(origin["identity"]) if origin["identity"] in queue else len(queue)

    def execution_priority(self, wildcards) -> int:
        """Resumed work first, then rescores, then seed 0 on the first search view, so every
        node gets a first score early."""
        resume = self.resume_rank(wildcards.node)
        if resume is not None:
            return 1000 - resume
        rescore = rescore_rank(self.ring.root, self.node(wildcards.node))
        if rescore is not None and wildcards.variant == "s0":
            return 500 - rescore
        selection = self.selection_rank(wildcards.node, wildcards.variant)
        if selection is not None:
            return 300 - selection
        if wildcards.variant == "s0" and wildcards.view == self.lock().search_views[0]:
            return 100
        return 50 if wildcards.variant == "s0" else 10

    def selection_rank(self, node: str, variant: str) -> int | None:
        """A review or guard run's place in final selection: the rank-1 finalist's runs (and
        the guard's other side, which every verdict needs) before the rank-2's, so that a
        tight clock cuts the later finalists, not the first (docs/guard.md#cut-is-not-failed).
        None for other runs, or before the finalists are ranked."""
        if not (is_review_variant(variant) or is_guard_variant(variant)):
            return None
        if not self.ring.ranking.exists():
            return None
        if self.ring.seated.exists() and node == reference_node(read_json(self.ring.seated)):
            return 0
        finalists = read_json(self.ring.ranking)["finalists"]
        return finalists.index(node) if node in finalists else None

    def execution_limits(self, wildcards) -> dict:
        return view_limits(self.lock(), wildcards.view)

    def execution_threads(self, wildcards) -> int:
        return self.execution_limits(wildcards)["threads"]

    def execution_gpus(self, wildcards) -> int:
        """GPUs per execution where the profile declares GPU slots (profiles/gpu)."""
        return self.config.gpus_per_execution if self.gpu_slots else 0

    def execution_request(self, wildcards) -> Request:
        """What one execution asks of a scheduler, the same figures the lock checks against
        a SLURM partition (cluster/slurm.py)."""
        return execution_request(self.execution_limits(wildcards), self.locked_config())

    def execution_mem_mb(self, wildcards) -> int:
        """What the execution may use, plus room for the supervisor."""
        return self.execution_request(wildcards).memory_mb

    def execution_runtime(self, wildcards) -> int:
        """Minutes a scheduler allows the job (SLURM's `--time`, evaluated as the job is
        submitted): ringflow's own deadline for the execution, the grace and scoring, never
        past the ring's stop_at (cluster/slurm.py)."""
        ring = self.lock()
        try:
            deadline = deadline_for(ring, wildcards.view, wildcards.variant)()
        except (InputError, OSError, ValueError):
            deadline = None
        return job_time_limit_min(self.execution_limits(wildcards), self.locked_config(),
                                  time.time(), deadline, ring.stop_at)  # fmt: skip

    def session_runtime(self, wildcards) -> int:
        """Minutes a scheduler allows an engineer session's job: until the hand-over point,
        the grace and the settling of its workspace, never past the ring's stop_at."""
        ring = self.lock()
        try:
            handover = handover_at(ring)
        except (InputError, OSError, ValueError, KeyError):
            handover = ring.stop_at or time.time()  # no cutoff yet: until stop_at
        return session_time_limit_min(self.locked_config(), time.time(), handover,
                                      ring.stop_at)  # fmt: skip

    # ---- search -----------------------------------------------------------------------

    def search_inputs(self, wildcards) -> list[str]:
        """The search ends once the static candidates have seed 0 and the --ablate control,
        the baseline and the rescores seed 0, and the search loop has ended."""
        baseline = [b for b in [self.baseline()] if b]
        static = self.score_files(self.ready_static("candidate"), ["s0", "s0-ablate"])
        static += self.score_files(baseline + self.rescore_nodes(), ["s0"])
        return [*static, str(self.ring.search_loop)]

    def resumes_engineer_work(self) -> bool:
        """Whether this ring resumes engineer work (its resume queue, fixed at import)."""
        self.imported()
        if not self.ring.carryover_imported.exists():
            return False  # nodes imported without the carryover step
        imported = read_json(self.ring.carryover_imported)
        kinds = {item["identity"]: item["kind"] for item in imported["imported"]}
        return any(kinds.get(identity) == "engineer" for identity in imported["queue"])

    def generation_inputs(self, wildcards) -> list[str]:
        """Generation g starts once g-1's nodes are settled and scored (seed 0); the first
        once the static candidates are, so that parents are drawn among scored nodes.
        Resumed engineer work is generation 0 and starts at once; generation 1 then waits
        for the static candidates too."""
        g = int(wildcards.g)
        walked = self.generations(upto=g)
        first = 1 if self.resumes_engineer_work() else 0
        searched = self.ready_static("candidate") + self.rescore_nodes()
        inputs = self.score_files(searched, ["s0"]) if g == first else []
        if g > 0:
            inputs += _paths([self.ring.settled(g - 1)])
            inputs += self.score_files(walked[g - 1]["ready"], ["s0"])
        return inputs

    def session_priority(self, wildcards) -> int:
        """Resumed engineer work before new work: its generation and its sessions."""
        if hasattr(wildcards, "g"):  # the generation rule, else a session (by node)
            return 1500 if wildcards.g == "0" and self.resumes_engineer_work() else 0
        return 1500 if self.resume_rank(wildcards.node) is not None else 0

    def settle_inputs(self, wildcards) -> list[str]:
        """Every session of generation g (all of them start at once)."""
        g = int(wildcards.g)
        self.generations(upto=g)
        plan = read_json(self.checkpoints.output("search_generation", g=g))
        return _paths(self.ring.session(node) for node in plan["nodes"])

    def engineer_inputs(self, wildcards) -> list[str]:
        path = self.ring.node_json(wildcards.node)
        origin = Node.from_record(read_json(path), source=path).origin
        return _ancient([self.ring.generation(origin["generation"])])

    def search_loop_inputs(self, wildcards) -> list[str]:
        walked = self.generations()
        inputs = _paths([self.ring.generation(walked[-1]["plan"]["generation"])])
        for step in walked[:-1]:
            inputs += _paths([self.ring.settled(step["plan"]["generation"])])
            inputs += self.score_files(step["ready"], ["s0", "s0-ablate"])
        return inputs

    # ---- promotion and final selection ------------------------------------------------

    def promoted_inputs(self, wildcards) -> list[str]:
        """Seeds 1 and 2 of every promoted node on the search views; a comparable imported
        promotion score stands in for this ring's run."""
        promoted = self.promotion()["promoted"]
        lock = self.lock()
        return _paths(
            self.ring.score(node, view, variant)
            for node in promoted
            for view in lock.search_views
            for variant in ["s1", "s2"]
            if not imported_score(self.ring, node, view, variant, lock.search_hash)
        )

    def screen_inputs(self, wildcards) -> list[str]:
        """The view-blind check's first screen: seed 0 on the first search view and two
        disguised copies, once the baseline is seated."""
        view = self.lock().search_views[0]
        variants = ["s0", "blind-s0", "blind2-s0"]
        return _paths([self.ring.seated]) + self.score_files([wildcards.node], variants, [view])

    def review_inputs(self, wildcards) -> list[str]:
        """The screen, and the further runs it asked for (a flagged program that varies)."""
        view = self.lock().search_views[0]
        screen = self.screen(wildcards.node)
        extra = self.score_files([wildcards.node], review_variants(screen), [view])
        return _paths([self.ring.screen(wildcards.node)]) + extra

    def guard_variants(self) -> list[str]:
        return [f"g{seed}" for seed in self.lock().guard_seeds]

    def verdict_inputs(self, wildcards) -> list[str]:
        rank = int(wildcards.rank)
        self.verdicts(upto=rank)
        node = self.finalists()[rank - 1]
        lock = self.lock()
        if guarded_before(lock, node) is not None:
            return _paths([self.ring.seated, self.ring.ranking])
        review = self.review(node)
        inputs = _paths([self.ring.review(node)])
        if review["passed"]:
            sides = [node, reference_node(self.seated())]  # the incumbent, or the baseline
            inputs += self.score_files(sides, self.guard_variants(), guard_views(lock))
        return inputs

    def power_inputs(self, wildcards) -> list[str]:
        """The baseline's probe runs on the guard views (docs/guard.md#power)."""
        base = [b for b in [self.baseline()] if b]
        return self.score_files(base, probe_variants(), guard_views(self.lock()))

    def decision_inputs(self, wildcards) -> list[str]:
        seated = self.seated()
        if seated["refused"]:
            return _paths([self.ring.seated])
        verdicts = self.verdicts()
        ranking = self.ranking()
        chosen, _, _ = choose(self.lock(), seated, ranking, verdicts)
        sides = sorted({n for n in (chosen, reference_node(seated), seated["baseline"]) if n})
        inputs = _paths([self.ring.seated, self.ring.ranking])
        if self.guard_on():
            inputs += _paths([self.ring.power])
        inputs += _paths(self.ring.verdict(rank) for rank in range(1, len(verdicts) + 1))
        return inputs + self.score_files(sides, ["s0"], [self.lock().final_view])

    def repro_inputs(self, wildcards) -> list[str]:
        """After the decision, never before it, and nothing after a refusal: the trained
        finalists' cold retrain and the other guarded finalists' final-view runs."""
        decision = self.decision()
        if decision["decision"] in ("refused", "none"):
            return _paths([self.ring.decision, self.ring.promotion])
        lock = self.lock()
        nodes = trained_finalists(self.ring.root, self.finalists())
        others = after_decision_final_runs(decision)
        return (
            _paths([self.ring.decision])
            + self.score_files(nodes, ["s0", "fresh-s0"], [lock.search_views[0]])
            + self.score_files(others, ["s0"], [lock.final_view])
        )
