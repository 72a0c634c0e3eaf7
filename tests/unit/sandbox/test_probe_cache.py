"""The sandbox probe is remembered per host and boot in the ring's probe folder
(docs/isolation.md#the-probe-cache): a job of a locked ring starts no bubblewrap of its own
to find out what the lock already found, and anything that could change the answer probes
again."""

from __future__ import annotations

import importlib
import os
import shutil
from pathlib import Path

import pytest

from ringflow.sandbox.probe import require_sandbox
from ringtools import sandbox_settings

# The module, not the function the package re-exports under its name.
probe_module = importlib.import_module("ringflow.sandbox.probe")

pytestmark = pytest.mark.sandbox

SETTINGS = sandbox_settings(mode="auto", uid=65534, gid=65534)


@pytest.fixture
def counted_bwrap(tmp_path, monkeypatch):
    """A bwrap first on PATH that counts its starts, then runs the real one."""
    real = shutil.which("bwrap")
    if real is None:
        pytest.skip("bubblewrap is not installed")
    calls = tmp_path / "calls"
    fake = tmp_path / "bin" / "bwrap"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\necho x >> {calls}\nexec {real} "$@"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    return fake, calls


def starts(calls: Path) -> int:
    return len(calls.read_text().splitlines()) if calls.exists() else 0


def new_process(monkeypatch) -> None:
    """What a new job starts with: nothing remembered in memory."""
    monkeypatch.setattr(probe_module, "_probes", {})


def test_a_second_job_reads_the_probe_instead_of_starting_bubblewrap(
    tmp_path, monkeypatch, counted_bwrap
):
    _, calls = counted_bwrap
    cache = tmp_path / "ring" / ".probes"
    new_process(monkeypatch)
    first = require_sandbox(SETTINGS, cache_dir=cache)
    probed = starts(calls)
    assert first["mode"] in ("root", "userns") and probed >= 1
    assert len(list(cache.glob("sandbox-*.json"))) == 1
    new_process(monkeypatch)
    second = require_sandbox(SETTINGS, cache_dir=cache)
    assert second == first
    assert starts(calls) == probed


def test_without_a_probe_folder_every_process_probes(tmp_path, monkeypatch, counted_bwrap):
    _, calls = counted_bwrap
    new_process(monkeypatch)
    require_sandbox(SETTINGS)
    once = starts(calls)
    new_process(monkeypatch)
    require_sandbox(SETTINGS)
    assert starts(calls) == 2 * once > 0


def test_a_reinstalled_bubblewrap_or_a_damaged_record_probes_again(
    tmp_path, monkeypatch, counted_bwrap
):
    fake, calls = counted_bwrap
    cache = tmp_path / ".probes"
    new_process(monkeypatch)
    require_sandbox(SETTINGS, cache_dir=cache)
    once = starts(calls)
    # The tool changed (a new inode and time): its old answer is not this tool's.
    replacement = fake.with_name("bwrap.new")
    replacement.write_text(fake.read_text())
    replacement.chmod(0o755)
    os.replace(replacement, fake)
    new_process(monkeypatch)
    require_sandbox(SETTINGS, cache_dir=cache)
    assert starts(calls) == 2 * once
    # A record that is not a working probe is probed over, never trusted.
    for record in cache.glob("sandbox-*.json"):
        record.write_text('{"mode": null}')
    new_process(monkeypatch)
    assert require_sandbox(SETTINGS, cache_dir=cache)["mode"] in ("root", "userns")
    assert starts(calls) == 3 * once


def test_a_failed_probe_is_not_remembered(tmp_path, monkeypatch):
    broken = tmp_path / "bin" / "bwrap"
    broken.parent.mkdir()
    broken.write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n"
    )
    broken.chmod(0o755)
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        pytest.skip("setpriv is not installed")
    monkeypatch.setenv("PATH", f"{broken.parent}:{os.environ['PATH']}")
    cache = tmp_path / ".probes"
    new_process(monkeypatch)
    with pytest.raises(Exception, match="no sandbox can be had"):
        require_sandbox(SETTINGS, cache_dir=cache)
    assert not list(cache.glob("*"))
