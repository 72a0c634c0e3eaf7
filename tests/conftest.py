"""Test-session housekeeping: every temporary folder the tests make lies under one session
folder, removed when the session ends, so a test run leaves nothing behind in /tmp."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

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
