"""The records a ring's steps write that no rule declares as its output: each step's private
records, listed here in one place, with the step that writes them and why it is no output.

Every other file of a ring folder is a declared output (or log) of a rule in rules/*.smk;
the workflow never reads a private record to decide what to run, so a private record can
change without making a finished step look out of date. docs/ring-folder.md describes the
fields of each.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

# (pattern relative to the ring folder; `*` also crosses folders), who writes it, and why.
PRIVATE_RECORDS: list[tuple[str, str, str]] = [
    ("ledger.jsonl", "every step", "the hash-chained ledger, appended to"),
    ("ledger.jsonl.lock", "every step", "the ledger's lock"),
    ("ledger.head", "every step", "the ledger's last hash"),
    ("events.jsonl", "every step", "the event log, appended to"),
    (".locks/*", "every step", "file locks"),
    (".probes/*", "execute", "a sandbox probe that worked, per host and boot"),
    ("slots.json", "the driver", "the concurrency this invocation gives"),
    ("cluster.json", "the driver", "the SLURM partition this invocation's executions go to"),
    ("cluster_node.json", "lock", "what the probe job found on a SLURM compute node"),
    ("logs/slurm/*", "the SLURM executor plugin", "each SLURM job's own log"),
    ("cutoff.json", "lock, timekeeper", "the live cutoff, only ever moved earlier"),
    ("cutoff.json.lock", "lock, timekeeper", "its lock"),
    ("final_timing.json", "timekeeper", "reserved against used time per stage"),
    ("final_timing.json.lock", "timekeeper", "its lock"),
    ("final_k.json", "rank", "the number of finalists the reserve allows"),
    ("sources.json", "import", "where each node's code came from"),
    ("inputs/*", "lock", "the snapshot of the views' public inputs"),
    ("views/*", "lock, review", "view manifests and the review's disguised copies"),
    ("keys/attempts/*", "execute", "training attempts per weights key"),
    ("nodes/index.json", "import, search", "every node as the search grows it"),
    ("nodes/*/node.json", "import, search, seal", "a node's record"),
    ("nodes/*/solution/*", "import, engineer", "a node's submitted code"),
    ("nodes/*/exec/*/*/output/*", "execute", "what the program wrote"),
    ("nodes/*/exec/*/*/health/*", "execute", "the supervisor's health samples"),
    ("nodes/*/exec/*/*/stdout.log", "execute", "the program's output"),
    ("nodes/*/exec/*/*/stderr.log", "execute", "the program's errors"),
    ("nodes/*/exec/*/*/scorer.log", "execute", "the scorer's and validator's output"),
    ("nodes/*/exec/*/*/scoring/*", "execute", "the scorer's raw record"),
    ("nodes/*/exec/*/*/weights/*", "execute", "weights a run trained, until registered"),
    ("nodes/*/carryover/*", "seal", "sealed carried-over work"),
    ("carryover/imported/*", "import-carryover", "verified copies of the sealed work resumed"),
    ("nodes/*/evidence/*", "seal", "sealed evidence of a session cut at the hand-over"),
    ("nodes/*/workspace/*", "engineer", "the engineer session's working copy"),
    ("nodes/*/trajectory/*", "engineer", "the session's log"),
    ("nodes/*/*.jsonl", "engineer", "queries and best-so-far evaluations"),
    ("nodes/*/*.json", "engineer", "the session's plan and hand-over records"),
    ("nodes/*/*.md", "engineer", "the session's instructions"),
    ("final/*", "seat-baseline, decide, repro", "the deployable result, replaced whole"),
    ("STOPPED.json", "any step", "why the machinery stopped the ring"),
    ("package/*", "ringflow package", "a packaged result, on request"),
    ("chain.html", "report", "a continuation's chain page; it reads the earlier rings"),
    ("*.html", "ringflow report", "pages written on request (--out, --chain)"),
]


def private_record(relative: str) -> str | None:
    """The pattern that lists this file (relative to its ring folder) as private, or None."""
    for pattern, _writer, _why in PRIVATE_RECORDS:
        if fnmatchcase(relative, pattern):
            return pattern
    return None
