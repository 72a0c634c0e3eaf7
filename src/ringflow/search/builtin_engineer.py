"""ringflow's built-in engineer: real variants of a parent, no model needed.

Run by ringflow in the engineer sandbox with the candidates' interpreter (standard
library only). An improvement changes one hyper-parameter of its parent's copy in the
workspace: a module-level numeric constant of run.py (N_TREES = 60), a known keyword
argument (C=0.5, alpha=1e-3, max_iter=400, ...) or a number in a parameter file
(*.json other than ARTIFACTS.json and EXECUTION.json), scaled by 0.5, 0.8, 1.25 or 2.
A draft copies one of the ring's candidates first (the candidates folder, read-only at
RINGFLOW_ENGINEER_LIBRARY; the demo's for the demo task), then changes it the same way.
RINGFLOW_ENGINEER_DELAY_S seconds pass before anything is written (a slow engineer).
Every choice is seeded by the node id, so a rerun makes the same variant.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import sys
import time
from pathlib import Path

FACTORS = (0.5, 0.8, 1.25, 2.0)
KEYWORDS = ("C", "alpha", "max_iter", "n_estimators", "max_depth", "n_neighbors",
            "learning_rate_init", "min_samples_leaf")  # fmt: skip
CONSTANT = re.compile(
    r"^(?P<name>[A-Z][A-Z0-9_]*)(?P<eq>\s*=\s*)(?P<value>-?\d[\d_.eE+-]*)\b", re.M
)
KEYWORD = re.compile(r"\b(?P<name>" + "|".join(KEYWORDS) + r")(?P<eq>=)(?P<value>-?\d[\d.eE+-]*)\b")
SKIP_JSON = {"ARTIFACTS.json", "EXECUTION.json", "progress.json"}


def log(message: str) -> None:
    print(f"[builtin engineer {time.strftime('%H:%M:%S')}] {message}", flush=True)


def scaled(text: str, rng: random.Random) -> str:
    factor = rng.choice(FACTORS)
    if re.fullmatch(r"-?\d+", text.replace("_", "")):
        return str(max(1, round(int(text.replace("_", "")) * factor)))
    return repr(float(text) * factor)


def source_sites(text: str) -> list[tuple[int, int, str]]:
    """(start, end, name) of each numeric value the engineer may change in run.py."""
    sites = []
    for pattern in (CONSTANT, KEYWORD):
        for match in pattern.finditer(text):
            sites.append((match.start("value"), match.end("value"), match.group("name")))
    return sites


def json_sites(data, path=()):
    if isinstance(data, dict):
        for key, value in data.items():
            yield from json_sites(value, (*path, key))
    elif isinstance(data, (int, float)) and not isinstance(data, bool):
        yield path


def mutate_json(workspace: Path, rng: random.Random) -> str | None:
    files = sorted(p for p in workspace.glob("*.json") if p.name not in SKIP_JSON)
    candidates = []
    for path in files:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        candidates += [(path, data, site) for site in json_sites(data)]
    if not candidates:
        return None
    path, data, site = rng.choice(candidates)
    holder = data
    for key in site[:-1]:
        holder = holder[key]
    old = holder[site[-1]]
    new = (
        type(old)(float(scaled(str(old), rng)))
        if isinstance(old, int)
        else float(scaled(str(old), rng))
    )
    holder[site[-1]] = new
    path.write_text(json.dumps(data, indent=1))
    return f"{path.name}: {'.'.join(map(str, site))} {old} -> {new}"


def mutate_source(workspace: Path, rng: random.Random) -> str | None:
    program = workspace / "run.py"
    if not program.is_file():
        return None
    text = program.read_text()
    sites = source_sites(text)
    if not sites:
        return None
    start, end, name = rng.choice(sites)
    old = text[start:end]
    new = scaled(old, rng)
    program.write_text(text[:start] + new + text[end:])
    return f"run.py: {name} {old} -> {new}"


def draft(workspace: Path, library: Path | None, rng: random.Random) -> str:
    folders = library.iterdir() if library is not None else ()
    choices = sorted(p for p in folders if p.is_dir() and p.name != "crasher")
    if not choices:
        raise SystemExit(
            "no candidate to start a draft from: the ring has no candidates folder (or it "
            "is empty); engineer.template gives drafts a start"
        )
    source = rng.choice(choices)
    for item in source.iterdir():
        dest = workspace / item.name
        if item.is_dir():
            shutil.copytree(item, dest)
        else:
            shutil.copyfile(item, dest)
    return source.name


def main() -> int:
    workspace = Path(os.environ.get("RINGFLOW_WORKSPACE", "."))
    rng = random.Random(os.environ.get("RINGFLOW_ENGINEER_SEED", "builtin"))
    delay = float(os.environ.get("RINGFLOW_ENGINEER_DELAY_S", "0"))
    origin = os.environ.get("RINGFLOW_ORIGIN", "improve")
    log(f"node {os.environ.get('RINGFLOW_NODE')} ({origin}); working for {delay:g} s")
    time.sleep(delay)
    notes = []
    if not (workspace / "run.py").exists() and not (workspace / "EXECUTION.json").exists():
        library = os.environ.get("RINGFLOW_ENGINEER_LIBRARY")
        source = draft(workspace, Path(library) if library else None, rng)
        notes.append(f"drafted from the candidate {source}")
    change = mutate_source(workspace, rng) if rng.random() < 0.5 else None
    change = change or mutate_json(workspace, rng) or mutate_source(workspace, rng)
    notes.append(f"changed {change}" if change else "found no hyper-parameter to change")
    with open(workspace / "METHOD.md", "a") as method:
        method.write("\n\nVariant by the built-in engineer: " + "; ".join(notes) + ".\n")
    for note in notes:
        log(note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
