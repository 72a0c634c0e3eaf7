"""The README's walk-through, typed as a user types it: every shell block between its
`<!-- walk-through -->` markers runs, in order, from a folder laid out like the repository
root after `make setup`. A README that drifts from what ringflow does breaks this test."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from ringtools import REPO

README = REPO / "README.md"
BLOCK = re.compile(r"^```sh\n(.*?)^```\n", re.S | re.M)
# What a user's checkout holds after `make setup`; what a ring writes stays out of it.
CHECKOUT = (".venv", ".venv-program", "Snakefile", "rules", "config", "profiles", "envs",
            "scripts", "src", "pyproject.toml", "ringflow")  # fmt: skip


def walkthrough_blocks(text: str) -> list[str]:
    start, end = "<!-- walk-through -->", "<!-- /walk-through -->"
    assert text.count(start) == 1 and text.count(end) == 1, "the README marks one walk-through"
    section = text[text.index(start) : text.index(end)]
    blocks = BLOCK.findall(section)
    assert blocks, "the walk-through holds no shell block"
    return blocks


def commands_of(blocks: list[str]) -> list[str]:
    """The `./ringflow` and `snakemake` lines, as they will be run."""
    return [line for block in blocks for line in block.splitlines()
            if line.startswith(("./ringflow ", ".venv/bin/snakemake "))]  # fmt: skip


def test_the_walkthrough_uses_only_what_a_user_types():
    commands = commands_of(walkthrough_blocks(README.read_text()))
    verbs = [line.split()[1] for line in commands if line.startswith("./ringflow ")]
    assert verbs == ["check", "summary", "export"], commands
    assert any(line.startswith(".venv/bin/snakemake --profile profiles/local") for line in commands)


def _checkout(root: Path) -> Path:
    for name in CHECKOUT:
        (root / name).symlink_to(REPO / name)
    return root


@pytest.mark.e2e
@pytest.mark.user
def test_the_readme_walkthrough_runs_as_written(tmp_path):
    root = _checkout(tmp_path)
    for block in walkthrough_blocks(README.read_text()):
        proc = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=root,
                              capture_output=True, text=True, timeout=1500)  # fmt: skip
        assert proc.returncode == 0, (block[:400], proc.stdout[-4000:], proc.stderr[-4000:])

    ring = root / "runs" / "mine"
    assert (ring / "stop_manifest.json").is_file()
    final = json.loads((ring / "final" / "FINAL.json").read_text())
    assert final["decision"] in ("candidate", "baseline"), final["decision"]
    nodes = {json.loads(p.read_text())["id"] for p in ring.glob("nodes/*/node.json")}
    assert any(node.endswith("-lookup") for node in nodes), nodes
    # The candidate trained its table once per view and replayed it.
    lookup = next(n for n in nodes if n.endswith("-lookup"))
    s0 = json.loads((ring / "nodes" / lookup / "exec" / "proxy" / "s0" / "result.json").read_text())
    assert s0["status"] == "ok", s0
    # The export is the chosen program, deployable: its MANIFEST.json says what it is.
    manifest = json.loads((root / "my-model" / "MANIFEST.json").read_text())
    assert manifest["node"] == final["chosen"]
    assert (root / "my-model" / "run.py").is_file()
