"""Why the ring's DAG marks an input `ancient` only once no job can write it again
(ringflow.workflow.dag): with the pinned Snakemake, a job whose ancient input exists
while that input's job is still running when a checkpoint completes is dropped, with
every step after it, and Snakemake ends with exit 0 as if the work were done."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# p writes k.txt at once and runs on; checkpoint c completes meanwhile, so Snakemake
# updates its DAG while k.txt exists and p has not finished.
SNAKEFILE = textwrap.dedent(
    """
    def k_input(wildcards):
        return ancient("k.txt") if config["ancient"] else "k.txt"

    rule all:
        input: "r.txt", "after_c.txt"

    checkpoint c:
        output: "c.txt"
        shell: "sleep 2; echo c > {output}"

    rule p:
        output: "k.txt"
        shell: "echo k > {output}; sleep 5"

    rule r:
        input: k_input
        output: "r.txt"
        shell: "echo r > {output}"

    def after_c(wildcards):
        checkpoints.c.get()
        return "c.txt"

    rule after_c:
        input: after_c
        output: "after_c.txt"
        shell: "echo a > {output}"
    """
)


def _run(folder: Path, ancient: bool) -> subprocess.CompletedProcess:
    folder.mkdir()
    (folder / "Snakefile").write_text(SNAKEFILE)
    argv = [sys.executable, "-m", "snakemake", "--cores", "2", "--config", f"ancient={ancient}"]
    return subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("ancient", [True, False])
def test_an_ancient_input_written_by_a_running_job_drops_its_consumer(tmp_path, ancient):
    proc = _run(tmp_path / "w", ancient)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "w" / "k.txt").exists()
    # Ancient: r never runs, yet Snakemake reports success. Plain: r runs.
    assert (tmp_path / "w" / "r.txt").exists() is not ancient, proc.stderr[-3000:]
