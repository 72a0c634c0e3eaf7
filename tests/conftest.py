"""Shared test fixtures, and test-session housekeeping: every temporary folder the tests
make lies under one session folder, removed when the session ends, so a test run leaves
nothing behind in /tmp; and, when the suite runs on several workers (pytest-xdist,
`make test`), which tests must share one worker."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

SESSION_VAR = "RINGFLOW_TEST_TMP"
# Tests that read one ring built once per worker (tests/ringtools.py): spread over several
# workers, each would build it again. The demo chain takes minutes of mostly idle clock
# time, so it starts first and the other workers' tests run beside it.
SHARED_RINGS = {"finished_demo_chain": "demo-chain", "finished_demo_ring": "demo-ring"}
_created: list[Path] = []


def _make_writable_and_retry(func, path, _exc):
    """rmtree's error hook: read-only folders (submissions, stores) are made writable first."""
    parent = os.path.dirname(path)
    os.chmod(parent, stat.S_IMODE(os.lstat(parent).st_mode) | stat.S_IRWXU)
    if os.path.isdir(path) and not os.path.islink(path):
        os.chmod(path, stat.S_IMODE(os.lstat(path).st_mode) | stat.S_IRWXU)
    func(path)


def remove_tree(path: Path) -> None:
    if path.exists():
        shutil.rmtree(path, onerror=_make_writable_and_retry)


def pytest_configure(config):
    if config.option.basetemp or os.environ.get(SESSION_VAR):
        return  # an outer session (or the user) chose where temporary files go
    session = Path(tempfile.mkdtemp(prefix="ringflow-tests-"))
    _created.append(session)
    os.environ[SESSION_VAR] = str(session)
    config.option.basetemp = str(session / "pytest")
    stage = Path(tempfile.gettempdir()) / f"ringflow-stage-{os.geteuid()}"
    if not stage.exists():
        _created.append(stage)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under `--dist loadgroup`, one work unit per module (its module-scoped rings are
    built once) or per shared ring (every module that reads it), the shared rings first."""
    groups: dict[Path, str] = {}
    for item in items:
        path = item.path
        if path not in groups:
            source = path.read_text() if path.suffix == ".py" else ""
            shared = (g for name, g in SHARED_RINGS.items() if name in source)
            groups[path] = next(shared, path.stem)
        if not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(groups[path]))
    first = set(SHARED_RINGS.values())
    items.sort(key=lambda item: item.get_closest_marker("xdist_group").args[0] not in first)


def pytest_unconfigure(config):
    for path in _created:
        remove_tree(path)


@pytest.fixture
def listener():
    """A TCP listener on 127.0.0.1 that a sandboxed program must not reach."""
    from ringtools import loopback_listener

    with loopback_listener() as address:
        yield address


@pytest.fixture
def broken_bwrap(tmp_path, monkeypatch):
    """A bwrap first on PATH that fails the way a locked-down kernel makes it fail."""
    fake = tmp_path / "fakebin" / "bwrap"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ.get('PATH', os.defpath)}")
    return fake


@pytest.fixture
def synced(monkeypatch):
    """The paths os.fsync is called on from here on, in order (each is still synced)."""
    paths: list[str] = []
    real = os.fsync

    def recording(fd: int) -> None:
        paths.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", recording)
    return paths
