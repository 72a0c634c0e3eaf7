"""Helpers for tests that run whole rings: a scripted task whose scores the test controls,
scripted candidates, and a runner for Snakemake on a temporary folder."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = Path(sys.executable).parent / "snakemake"

# The scorer command line every scripted scorer takes (task.yaml's scorer contract).
SCORER_ARGS = """\
import argparse, json, os, random, tempfile
p = argparse.ArgumentParser()
for a in ("--pred", "--labels", "--out"):
    p.add_argument(a)
p.add_argument("--seed", type=int)
p.add_argument("--bootstrap", type=int, default=0)
a = p.parse_args()
"""

SCORER = (
    SCORER_ARGS
    + """\
try:
    value = json.load(open(os.path.join(a.pred, "score.json")))["value"]
    truth = open(os.path.join(a.labels, "truth.txt")).read().strip()
    rec = {"score": float(value), "valid": True, "reason": "labels " + truth}
    if a.bootstrap:
        # The program's value is the score on any rows: this scorer ignores the seed.
        rec["bootstrap"] = [float(value)] * a.bootstrap
except Exception as exc:
    rec = {"score": None, "valid": False, "reason": f"no usable score.json: {exc}"}
fd, tmp = tempfile.mkstemp(dir=os.path.dirname(a.out))
with os.fdopen(fd, "w") as f:
    json.dump(rec, f)
os.replace(tmp, a.out)
"""
)

# A public validator for the scripted task: score.json must hold a number in [0, 1]; it
# reads a view's public inputs, as a validator may.
VALIDATOR = """\
import argparse, json, os, sys
p = argparse.ArgumentParser()
p.add_argument("--pred", required=True)
p.add_argument("--inputs", required=True)
a = p.parse_args()
open(os.path.join(a.inputs, "data.txt")).read()
try:
    value = json.load(open(os.path.join(a.pred, "score.json")))["value"]
except Exception as exc:
    sys.exit(f"no readable score.json: {exc}")
if not isinstance(value, (int, float)) or not 0 <= value <= 1:
    sys.exit(f"value {value!r} is not a number in [0, 1]")
"""

# A candidate whose score per (view, seed) is drawn from a distribution set in
# behaviour.json; with weights it "trains" a file holding the training seed.
PROGRAM = """\
import argparse, hashlib, json, os, random, sys, time
p = argparse.ArgumentParser()
p.add_argument("--seed", type=int, default=0)
p.add_argument("--ablate", action="store_true")
a = p.parse_args()
b = json.load(open("behaviour.json"))
if b.get("ignore_term"):
    import signal
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
view = os.environ.get("RINGFLOW_VIEW", "")
if a.seed in b.get("crash_seeds", []):
    sys.exit("crashing on purpose for seed %d" % a.seed)
time.sleep(b.get("sleep", 0))
if a.seed >= 3:  # guard seeds
    time.sleep(b.get("guard_sleep", 0))
time.sleep(b.get("seed_sleep", {}).get(str(a.seed), 0))
held = b"x" * (b.get("seed_hog_mb", {}).get(str(a.seed), 0) << 20)  # memory, written
if a.seed == 0 and time.time() > b.get("seed0_slow_after", float("inf")):
    time.sleep(b.get("seed0_slow_s", 0))  # seed-0 runs after that moment: the review's
data = open(os.path.join(os.environ["RINGFLOW_INPUT_DIR"], "data.txt")).read().strip()
train_note = None
if b.get("weights"):
    ex = json.load(open("EXECUTION.json")) if os.path.exists("EXECUTION.json") else {}
    tseed = a.seed if ex.get("seed_affects_training") else ex.get("train_seed", 0)
    path = "weights/model.txt"
    if os.path.exists(path):
        print("loaded weights", file=sys.stderr)
    else:
        time.sleep(b.get("train_sleep", 0))
        with open(path, "w") as f:
            f.write("trained seed=%d ablate=%s data=%s\\n" % (tseed, a.ablate, data))
        print("trained", file=sys.stderr)
rng = random.Random(f"{b.get('noise_key', 'x')}/{data}/{a.seed}")
value = b["mean"] + rng.gauss(0, b.get("sd", 0.0))
# Run-to-run noise no seed fixes (threads, clocks): the output varies between runs.
value += random.SystemRandom().uniform(-1, 1) * b.get("jitter", 0.0)
if b.get("view_sensitive"):
    # Its score follows the name it is given for the view (an alias drawn per ring).
    value -= 0.1 + 0.4 * int(hashlib.sha256(view.encode()).hexdigest()[:8], 16) / 2**32
if b.get("no_output"):
    sys.exit(0)
with open(os.path.join(os.environ["RINGFLOW_OUTPUT_DIR"], "score.json"), "w") as f:
    json.dump({"value": value}, f)
"""


def make_task(root: Path, views=("proxy", "x3", "final"), roles: dict | None = None) -> Path:
    """The scripted task; `roles` ({search, guard, final}) declares view roles instead of a
    plain view list (its views are created)."""
    task = root / "task"
    (task).mkdir(parents=True, exist_ok=True)
    if roles is not None:
        views = [*roles["search"], *roles.get("guard", []), roles["final"]]
    (task / "task.yaml").write_text(
        yaml.safe_dump(
            {
                "name": "scripted",
                "direction": "maximize",
                "scorer": "python scorer.py",
                "views": roles if roles is not None else list(views),
                "scorer_bootstrap": True,
                # The scripted scorer reads the program's own number: nothing to resample.
                "scorer_resamples": False,
            }
        )
    )
    (task / "scorer.py").write_text(SCORER)
    for view in views:
        (task / "views" / view / "inputs").mkdir(parents=True, exist_ok=True)
        (task / "views" / view / "labels").mkdir(parents=True, exist_ok=True)
        (task / "views" / view / "inputs" / "data.txt").write_text(f"data of {view}\n")
        (task / "views" / view / "labels" / "truth.txt").write_text(f"truth of {view}\n")
    return task


def make_candidate(
    folder: Path,
    *,
    mean: float,
    sd: float = 0.0,
    weights: bool = False,
    seed_affects_training: bool = False,
    **behaviour,
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "run.py").write_text(PROGRAM)
    (folder / "behaviour.json").write_text(
        json.dumps({"mean": mean, "sd": sd, "weights": weights, **behaviour})
    )
    if weights:
        (folder / "ARTIFACTS.json").write_text(
            json.dumps([{"path": "weights/model.txt", "sha256": None, "per_view": True}])
        )
        (folder / "EXECUTION.json").write_text(
            json.dumps({"seed_affects_training": seed_affects_training, "train_seed": 0})
        )
    return folder


FAST = yaml.safe_load((REPO / "config" / "quick.yaml").read_text())
DEFAULTS = yaml.safe_load((REPO / "config" / "config.yaml").read_text())


def merged(base: dict, overrides: dict) -> dict:
    """`base` with `overrides` laid over it, nested mappings merged key by key."""
    out = json.loads(json.dumps(base))
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key].update(value)
        else:
            out[key] = value
    return out


def sandbox_settings(**overrides):
    """The `sandbox` section as a ring reads it: the defaults with `overrides`."""
    from ringflow.core.settings import Sandbox

    return Sandbox.from_mapping({**DEFAULTS["sandbox"], **overrides})


def ring_config(**overrides):
    """full_config(**overrides) as a ring reads it (core.settings.RingConfig)."""
    from ringflow.core.settings import RingConfig

    return RingConfig.from_mapping(full_config(**overrides))


def full_config(**overrides) -> dict:
    """Every key, as a Snakemake run would see it: defaults, quick settings, overrides."""
    return merged(merged(DEFAULTS, FAST), overrides)


def scripted_config(workdir: Path, ring_id: str, **overrides) -> dict:
    """The full configuration of a ring over the scripted task, one candidate, no baseline."""
    make_candidate(workdir / "cands" / "a", mean=0.5)
    return full_config(ring_id=ring_id, task=str(make_task(workdir)),
                       candidates=str(workdir / "cands"), baseline=None, **overrides)  # fmt: skip


def locked_ring(workdir: Path, candidates: Path, ring_id: str, **overrides) -> Path:
    """A ring over the scripted task, locked and with its nodes imported, not run."""
    from ringflow.nodes import import_static
    from ringflow.ring.lock import lock_ring

    config = full_config(ring_id=ring_id, task=str(make_task(workdir)),
                         candidates=str(candidates), baseline=None, **overrides)  # fmt: skip
    ring = lock_ring(config, workdir)
    import_static(ring)
    return Path(ring.ring_dir)


def gated_ring(workdir: Path, program: str, gate_after_s: float) -> tuple[Path, Path]:
    """(configuration file, ring folder) of ring r1 over the scripted task with one
    candidate, n001-slow, running `program` with GATE set `gate_after_s` from now (the
    program waits for it where it chooses); no baseline, no guard, one promoted node."""
    make_task(workdir)
    slow = make_candidate(workdir / "cands" / "slow", mean=0.6)
    (slow / "run.py").write_text(f"GATE = {time.time() + gate_after_s}\n" + program)
    config = write_config(workdir, ring_id="r1", task=str(workdir / "task"),
                          candidates=str(workdir / "cands"), baseline=None,
                          guard={"enabled": False, "seeds": 5, "alpha": 0.05, "margin": 0.0},
                          promote_top_k=1)  # fmt: skip
    return config, workdir / "runs" / "r1"


def wrap_bwrap(workdir: Path, monkeypatch, before: str) -> None:
    """A bwrap first on PATH that runs the shell lines `before`, then the real bubblewrap.
    Set it before the ring starts: its jobs find bubblewrap on their PATH."""
    fake = workdir / "fakebin" / "bwrap"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\n{before}\nexec {shutil.which("bwrap")} "$@"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")


def write_config(workdir: Path, **overrides) -> Path:
    config = merged(FAST, overrides)
    path = workdir / f"{config.get('ring_id', 'ring')}-config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def step_argv(*args: str) -> list[str]:
    """A step as the workflow's rules run it: `python -m ringflow step NAME ...`."""
    return [sys.executable, "-m", "ringflow", "step", *args]


def snakemake_argv(workdir: Path, configfile: Path, *extra: str) -> list[str]:
    # Targets and extra options go first: --configfile takes every word that follows it.
    return [str(SNAKEMAKE), *extra, "-s", str(REPO / "Snakefile"), "--directory",
            str(workdir), "--profile", str(REPO / "profiles" / "local"), "--cores", "2",
            "--configfile", str(configfile)]  # fmt: skip


def start_snakemake(workdir: Path, configfile: Path) -> subprocess.Popen:
    """Snakemake in the background, in its own session, so a test can kill it alone."""
    return subprocess.Popen(snakemake_argv(workdir, configfile), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip


def snakemake(
    workdir: Path, configfile: Path, *extra: str, check: bool = True, timeout: float = 900
) -> subprocess.CompletedProcess:
    argv = snakemake_argv(workdir, configfile, *extra)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"snakemake failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
        )
    return proc


def results(ring: Path) -> dict[tuple[str, str, str], dict]:
    out = {}
    for path in ring.glob("nodes/*/exec/*/*/result.json"):
        out[(path.parts[-5], path.parts[-3], path.parts[-2])] = json.loads(path.read_text())
    return out


def dedent(text: str) -> str:
    return textwrap.dedent(text)


_demo_ring: Path | None = None
_demo_chain: Path | None = None


def chain_argv(work: Path, *targets: str) -> list[str]:
    """The demo chain's command (no configuration file: config/chain.yaml), in `work`."""
    return [str(SNAKEMAKE), "-s", str(REPO / "Snakefile"), "--directory", str(work),
            "--profile", str(REPO / "profiles" / "local"), "--cores", "2", *targets]  # fmt: skip


def finished_demo_chain() -> Path:
    """The folder where the demo chain (`make demo`) has run: RINGFLOW_DEMO_CHAIN_DIR when
    set (CI runs `make demo` as an ordinary user first), else run once per test session."""
    global _demo_chain
    if _demo_chain is None:
        given = os.environ.get("RINGFLOW_DEMO_CHAIN_DIR")
        if given:
            _demo_chain = Path(given)
        else:
            import tempfile

            work = Path(
                tempfile.mkdtemp(prefix="ringflow-chain-", dir=os.environ.get("RINGFLOW_TEST_TMP"))
            )
            proc = subprocess.run(chain_argv(work, "ring2"), capture_output=True, text=True,
                                  timeout=1500)  # fmt: skip
            assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
            _demo_chain = work
    return _demo_chain


def finished_demo_ring() -> Path:
    """The embedded demo ring, run once per test session (fast health settings, 1 thread)."""
    global _demo_ring
    if _demo_ring is None:
        import tempfile

        # Under the session's temporary folder (tests/conftest.py), removed at its end.
        work = Path(
            tempfile.mkdtemp(prefix="ringflow-demo-", dir=os.environ.get("RINGFLOW_TEST_TMP"))
        )
        snakemake(work, write_config(work, ring_id="demo"))
        _demo_ring = work / "runs" / "demo"
    return _demo_ring


@contextlib.contextmanager
def loopback_listener():
    """A TCP listener on 127.0.0.1 ("host:port") that a sandboxed program must not reach."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()
