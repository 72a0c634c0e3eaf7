"""Every path inside a ring folder, built in one place (rules and package share it)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

SEARCH_VARIANTS = ("s0", "s0-ablate", "s1", "s2")
VARIANT_PATTERN = r"s0|s0-ablate|s1|s2|g\d+|fresh-s0|real-s0|blind-s0|blind\d+-s0"
# At least three digits (n000-…, n999-…, n1000-…): never runs out. Not `{3,}`: Snakemake
# wildcard constraints accept only `{m}` and `{m,n}` quantifiers.
NODE_PATTERN = r"n\d{3}\d*-[a-z0-9][a-z0-9._-]*"
VIEW_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]*"


def node_slug(name: str) -> str:
    """The part of a node id after its number: the candidate's name, made safe for a path."""
    slug = re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-._") or "node"
    return slug[:40]


@dataclass(frozen=True)
class RingLayout:
    root: Path

    @property
    def boxes(self) -> Path:
        """Where runs' boxes are made: beside the rings, not in one, so that the paths the
        mount table shows a program name no ring (docs/isolation.md)."""
        return self.root.parent / ".boxes"

    @property
    def ring_json(self) -> Path:
        return self.root / "RING.json"

    @property
    def ledger(self) -> Path:
        return self.root / "ledger.jsonl"

    @property
    def events(self) -> Path:
        return self.root / "events.jsonl"

    @property
    def cutoff(self) -> Path:
        return self.root / "cutoff.json"

    @property
    def nodes_index(self) -> Path:
        """Every node of the ring as the search grows it (a living record)."""
        return self.root / "nodes" / "index.json"

    @property
    def nodes_static(self) -> Path:
        """The nodes the import made, frozen: the import checkpoint's output."""
        return self.root / "nodes" / "static.json"

    def view_manifest(self, view: str) -> Path:
        return self.root / "views" / f"{view}.json"

    def disguised_view(self, view: str) -> Path:
        return self.root / "views" / "disguised" / view

    def node_dir(self, node: str) -> Path:
        return self.root / "nodes" / node

    def node_json(self, node: str) -> Path:
        return self.node_dir(node) / "node.json"

    def submission(self, node: str) -> Path:
        return self.node_dir(node) / "solution"

    def exec_dir(self, node: str, view: str, variant: str) -> Path:
        return self.node_dir(node) / "exec" / view / variant

    def result(self, node: str, view: str, variant: str) -> Path:
        return self.exec_dir(node, view, variant) / "result.json"

    def score(self, node: str, view: str, variant: str) -> Path:
        return self.exec_dir(node, view, variant) / "score.json"

    def executions(self, node: str = "*") -> list[tuple[str, str, str, Path]]:
        """(node, view, variant, folder) of every execution folder, started or done, of the
        ring or of one node, in a stable order."""
        found = []
        for folder in sorted(self.root.glob(f"nodes/{node}/exec/*/*")):
            if folder.is_dir():
                found.append((folder.parts[-4], folder.parts[-2], folder.parts[-1], folder))
        return found

    def results(self) -> list[tuple[str, str, str, Path]]:
        """(node, view, variant, result.json) of every execution that has ended."""
        return [
            (node, view, variant, path)
            for node, view, variant, folder in self.executions()
            if (path := folder / "result.json").is_file()
        ]

    def node_files(self, name: str) -> list[Path]:
        """`nodes/<node>/<name>` of every node that has one, in node order."""
        return sorted(self.root.glob(f"nodes/*/{name}"))

    def key_target(self, key: str) -> Path:
        return self.root / "keys" / f"{key}.json"

    @property
    def selection(self) -> Path:
        """The folder of final selection's records."""
        return self.root / "selection"

    def reviews(self) -> list[Path]:
        """Every finalist's review record, by name."""
        return sorted(self.selection.glob("review-*.json"))

    def verdicts(self) -> list[Path]:
        """Every guard verdict, by name."""
        return sorted(self.selection.glob("verdict-*.json"))

    @property
    def promotion(self) -> Path:
        return self.selection / "promotion.json"

    @property
    def ranking(self) -> Path:
        return self.selection / "ranking.json"

    @property
    def power(self) -> Path:
        """The guard's power, estimated from the baseline's probe runs (docs/guard.md#power)."""
        return self.selection / "power.json"

    @property
    def seated(self) -> Path:
        return self.selection / "baseline_seated.json"

    def review(self, node: str) -> Path:
        return self.selection / f"review-{node}.json"

    def screen(self, node: str) -> Path:
        """The view-blind check's first screen of a finalist (its further runs follow)."""
        return self.selection / f"screen-{node}.json"

    def verdict(self, rank: int) -> Path:
        return self.selection / f"verdict-{rank}.json"

    @property
    def decision(self) -> Path:
        return self.selection / "decision.json"

    @property
    def repro(self) -> Path:
        return self.root / "final" / "REPRO.json"

    @property
    def repro_record(self) -> Path:
        return self.selection / "repro.json"

    @property
    def search(self) -> Path:
        return self.selection / "search.json"

    @property
    def final_dir(self) -> Path:
        return self.root / "final"

    @property
    def summary(self) -> Path:
        return self.root / "summary.txt"

    @property
    def report(self) -> Path:
        return self.root / "report.html"

    def generation(self, generation: int) -> Path:
        return self.root / "search" / f"gen-{generation}.json"

    def settled(self, generation: int) -> Path:
        return self.root / "search" / f"settled-{generation}.json"

    @property
    def search_loop(self) -> Path:
        return self.root / "search" / "loop.json"

    def session(self, node: str) -> Path:
        return self.node_dir(node) / "session.json"

    def trajectory(self, node: str) -> Path:
        return self.node_dir(node) / "trajectory"

    @property
    def carryover_imported(self) -> Path:
        return self.root / "carryover" / "imported.json"

    @property
    def carryover_seals(self) -> Path:
        return self.root / "carryover" / "seals.json"

    def seal(self, node: str) -> Path:
        return self.node_dir(node) / "carryover" / "SEAL.json"

    @property
    def stopped(self) -> Path:
        """Why the machinery stopped the ring (core/stop.py)."""
        return self.root / "STOPPED.json"

    @property
    def stop_manifest(self) -> Path:
        return self.root / "stop_manifest.json"

    @property
    def slots(self) -> Path:
        return self.root / "slots.json"

    @property
    def final_k(self) -> Path:
        return self.root / "final_k.json"

    @property
    def final_timing(self) -> Path:
        return self.root / "final_timing.json"

    @property
    def cluster_jobs(self) -> Path:
        """The SLURM job of every execution that started in one, a line each, appended by
        the execution as it starts (docs/slurm.md#job-ids-signals-and-kills)."""
        return self.root / "cluster" / "jobs.jsonl"

    @property
    def cluster_drivers(self) -> Path:
        """The job name of every driver run that submitted the ring's jobs to SLURM, a line
        each, so that the next run finds the jobs a dead driver left
        (docs/slurm.md#job-ids-signals-and-kills)."""
        return self.root / "cluster" / "drivers.jsonl"

    @property
    def locks(self) -> Path:
        return self.root / ".locks"

    @property
    def interrupt_mark(self) -> Path:
        """When the driver last relayed SIGINT or SIGTERM to the ring's executions
        (core/interrupts.py)."""
        return self.locks / "interrupt-relayed.json"

    @property
    def probes(self) -> Path:
        """What the ring's jobs found out about their host, once per boot (the sandbox
        probe): private to ringflow, never a record (docs/isolation.md#the-probe-cache)."""
        return self.root / ".probes"

    @property
    def cluster_node(self) -> Path:
        """What the lock's probe job found on a compute node under SLURM
        (docs/slurm.md#compute-nodes-are-probed)."""
        return self.root / "cluster_node.json"


def is_review_variant(variant: str) -> bool:
    """The view-blind check's runs: blind-s0, blind<N>-s0 (disguised copies) and real-s0
    (a fresh run on the real view), all seed 0 and fresh."""
    return variant == "real-s0" or re.fullmatch(r"blind\d*-s0", variant) is not None


def is_guard_variant(variant: str) -> bool:
    """A guard run: g<seed>."""
    return re.fullmatch(r"g\d+", variant) is not None


def variant_seed(variant: str) -> int:
    """The program seed of a variant: s<k>, g<seed>; fresh/blind/ablate run seed 0."""
    if variant.startswith("g"):
        return int(variant[1:])
    if variant in ("s1", "s2"):
        return int(variant[1])
    return 0
