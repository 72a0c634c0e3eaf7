"""A finished ring is immutable: re-running any target of the finished demo chain (`make
demo` again, `snakemake ring1`, the default target) does nothing and changes no file; and
every file the chain wrote under runs/ is a rule's declared output or log, or a private
record listed in ringflow.workflow.records."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ringflow.workflow.records import private_record
from ringtools import REPO, chain_argv, finished_demo_chain

# Building the demo chain (time-boxed rings, minutes) counts toward the test that needs it first.
pytestmark = [pytest.mark.e2e, pytest.mark.user, pytest.mark.timeout(1800)]


def _files(*tops: Path) -> dict[str, tuple[int, int]]:
    """Every file and link under the folders: its size and mtime (ns)."""
    found = {}
    for top in tops:
        for folder, dirs, files in os.walk(top):
            for name in files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
                path = os.path.join(folder, name)
                st = os.lstat(path)
                found[path] = (st.st_size, st.st_mtime_ns)
    return found


@pytest.mark.parametrize(
    "targets", [("ring2",), ("ring1",), ()], ids=["make-demo-again", "ring1", "default-target"]
)
def test_re_running_a_finished_chain_changes_nothing(targets):
    work = finished_demo_chain()
    # A user's own look at the finished rings (a fresh report) must not make them look out
    # of date either.
    for ring in ("demo", "demo-2"):
        subprocess.run([sys.executable, "-m", "ringflow", "report", str(work / "runs" / ring)],
                       capture_output=True, check=True, timeout=300)  # fmt: skip
    before = _files(work / "runs", work / "store")
    proc = subprocess.run(chain_argv(work, *targets), capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "Nothing to be done" in out, out[-4000:]
    after = _files(work / "runs", work / "store")
    changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    assert changed == [], changed


def _declared_patterns(work: Path) -> list:
    """Every output and log pattern of every rule of the workflow, as Snakemake reads it."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import (
        ConfigSettings,
        DeploymentSettings,
        OutputSettings,
        ResourceSettings,
        StorageSettings,
        WorkflowSettings,
    )

    cwd = os.getcwd()
    try:
        with SnakemakeApi(OutputSettings(quiet=True)) as api:
            workflow = api.workflow(
                snakefile=REPO / "Snakefile",
                workdir=work,
                resource_settings=ResourceSettings(),
                config_settings=ConfigSettings(),
                storage_settings=StorageSettings(),
                workflow_settings=WorkflowSettings(),
                deployment_settings=DeploymentSettings(),
            )
            return [
                pattern.regex()
                for rule in workflow._workflow.rules
                for pattern in [*rule.output, *rule.log]
            ]
    finally:
        os.chdir(cwd)


def test_every_file_of_the_chain_is_declared_or_a_listed_private_record():
    work = finished_demo_chain()
    declared = _declared_patterns(work)
    stray = []
    for path in _files(work / "runs"):
        relative = os.path.relpath(path, work)
        if any(regex.match(relative) for regex in declared):
            continue
        ring_relative = relative.split(os.sep, 2)[2]  # runs/<ring>/...
        if private_record(ring_relative) is None:
            stray.append(relative)
    assert stray == []
