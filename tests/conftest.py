"""Shared test fixtures, and test-session housekeeping: every temporary folder the tests
make lies under one session folder, removed when the session ends, so a test run leaves
nothing behind in /tmp."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

SESSION_VAR = "RINGFLOW_TEST_TMP"
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
