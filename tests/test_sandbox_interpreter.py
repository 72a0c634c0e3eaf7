"""The interpreter a program runs with must be reachable inside the sandbox, wherever it
is installed: a virtual environment in a checkout under /tmp (which the sandbox replaces
with a fresh tmpfs), on top of a Python installed under a private /root."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from ringflow import sandbox
from test_sandbox import make_ring

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None or os.geteuid() != 0, reason="needs bubblewrap, run as root"
)


@pytest.fixture
def venv_in_tmp():
    # A world-traversable folder directly under /tmp, as a checkout there would be.
    folder = Path(tempfile.mkdtemp(prefix="ringflow-venv-", dir="/tmp"))
    os.chmod(folder, 0o755)
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(folder / "venv")], check=True
    )
    yield folder / "venv" / "bin" / "python"
    shutil.rmtree(folder)


def test_a_venv_under_tmp_runs_inside_the_sandbox(tmp_path, venv_in_tmp, monkeypatch):
    monkeypatch.setenv("RINGFLOW_SANDBOX", "bwrap")
    ring = make_ring(tmp_path)
    secret = venv_in_tmp.parents[2] / "beside-the-venv.txt"
    secret.write_text("not for the program\n")
    program = f"import os, sys\nprint(os.getuid(), sys.prefix, os.path.exists({str(secret)!r}))\n"
    (ring.solution / "run.py").write_text(program)
    plan = sandbox.plan(ring.request(), [str(venv_in_tmp), "run.py"], {"PATH": "/usr/bin:/bin"})
    try:
        done = subprocess.run(
            plan.argv, env=plan.env, cwd=plan.cwd, capture_output=True, text=True, timeout=60
        )
    finally:
        plan.finish()
    assert done.returncode == 0, done.stderr
    uid, prefix, seen = done.stdout.split()
    assert uid == "65534" and prefix == str(venv_in_tmp.parent.parent)
    # Only the install is bound back: what lies beside it in the host's /tmp stays unseen.
    assert seen == "False"
