"""Hostile candidates against the real sandbox and evaluator (docs/operations.md#threat-model).

Each candidate tries what a program must never manage: read the ring, another node,
another ring, the labels, the store, a home folder, an undeclared data folder or the
task's scorer; reach a listener on 127.0.0.1; hand the scorer a pointer instead of
data; fill the disk; fork without end; see a concurrent execution; or tell a view-blind
run from a real one. Executions run through `ringflow step execute`, as the workflow runs them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ringtools import locked_ring, loopback_listener

pytestmark = [pytest.mark.e2e, pytest.mark.user]

HOSTILE = r"""
import json, os, socket, sys
b = json.load(open("behaviour.json"))
out = os.environ["RINGFLOW_OUTPUT_DIR"]
kind = b["kind"]
report = {}

def attempt(name, fn):
    try:
        value = fn()
        report[name] = {"ok": True, "value": value if isinstance(value, (str, int, list)) else None}
    except Exception as exc:
        report[name] = {"ok": False, "error": type(exc).__name__}

if kind == "snoop":
    for name, path in b["read"].items():
        attempt(name, lambda p=path: open(p).read() if os.path.isfile(p) else os.listdir(p))
    host, port = b["listener"].rsplit(":", 1)
    attempt("tcp", lambda: socket.create_connection((host, int(port)), timeout=3).close())
    pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    report["pids"] = pids
    for pid in pids:
        path = f"/proc/{pid}/environ"
        attempt(f"environ-{pid}", lambda p=path: open(p, "rb").read().decode(errors="replace"))
    report["env"] = dict(os.environ)
    report["cwd"] = os.getcwd()
    report["mountinfo"] = open("/proc/self/mountinfo").read()
    report["cmdline1"] = open("/proc/1/cmdline", "rb").read().decode(errors="replace")
    report["ringflow"] = sorted(os.listdir("/ringflow"))
    report["inputs"] = sorted(os.listdir(os.environ["RINGFLOW_INPUT_DIR"]))
    # How the inputs were made: what could tell a view-blind run from a real one.
    import time
    folder = os.environ["RINGFLOW_INPUT_DIR"]
    now = time.time()
    stats = {n: os.stat(os.path.join(folder, n)) for n in os.listdir(folder)}
    report["made"] = {
        "listing": os.listdir(folder),
        "inode_order": sorted(stats, key=lambda n: stats[n].st_ino),
        "nlink": {n: st.st_nlink for n, st in stats.items()},
        "mode": {n: st.st_mode for n, st in stats.items()},
        "size": {n: st.st_size for n, st in stats.items()},
        "mtime_ns": {n: st.st_mtime_ns for n, st in stats.items()},
        "ctime_age": {n: now - st.st_ctime for n, st in stats.items()},
        "owner": {n: [st.st_uid, st.st_gid] for n, st in stats.items()},
        "folder_nlink": os.stat(folder).st_nlink,
        "folder_ctime_age": now - os.stat(folder).st_ctime,
    }
    with open(os.path.join(out, "attacks.json"), "w") as f:
        json.dump(report, f)
    with open(os.path.join(out, "score.json"), "w") as f:
        json.dump({"value": 0.5}, f)
elif kind == "link":
    os.symlink(b["target"], os.path.join(out, "score.json"))
elif kind == "fifo":
    os.mkfifo(os.path.join(out, "score.json"))
elif kind == "fill":
    with open(os.path.join(out, "score.json"), "wb") as f:
        for _ in range(200):
            f.write(b"0" * (1 << 20))
elif kind == "fork":
    import subprocess, time
    kids = []
    for _ in range(500):
        try:
            kids.append(subprocess.Popen(["sleep", "60"]))
        except OSError:
            time.sleep(0.2)
    time.sleep(60)
"""


def hostile(folder: Path, kind: str, **fields) -> None:
    folder.mkdir(parents=True)
    (folder / "run.py").write_text(HOSTILE)
    (folder / "behaviour.json").write_text(json.dumps({"kind": kind, **fields}))


@pytest.fixture(scope="module")
def module_listener():
    """One listener for the module's arena (the conftest's `listener` is per test)."""
    with loopback_listener() as address:
        yield address


@pytest.fixture(scope="module")
def arena(tmp_path_factory, module_listener):
    work = tmp_path_factory.mktemp("hostile")
    task = work / "task"
    other = work / "runs" / "other-ring"
    other.mkdir(parents=True)
    (other / "RING.json").write_text('{"guard_seeds": [3]}')
    data = work / "data"
    data.mkdir()
    (data / "shared.csv").write_text("not declared\n")
    ring_dir = work / "runs" / "arena"
    targets = {
        "ring_lock": ring_dir / "RING.json",
        "view_manifest": ring_dir / "views" / "proxy.json",
        "other_node": ring_dir / "nodes",
        "other_ring": other / "RING.json",
        "labels": task / "views" / "proxy" / "labels" / "truth.txt",
        "final_inputs": task / "views" / "final" / "inputs",
        "scorer": task / "scorer.py",
        "store": work / "store",
        "home": Path(os.path.expanduser("~")),
        "data": data / "shared.csv",
        "task_root": task,
    }
    cands = work / "cands"
    hostile(cands / "snoop", "snoop", read={k: str(v) for k, v in targets.items()},
            listener=module_listener)  # fmt: skip
    labels = targets["labels"]
    hostile(cands / "linkabs", "link", target=str(labels))
    hostile(cands / "linkrel", "link", target="/proc/self/cwd/views/proxy/labels/truth.txt")
    hostile(cands / "devzero", "link", target="/dev/zero")
    hostile(cands / "fifo", "fifo")
    hostile(cands / "filler", "fill")
    hostile(cands / "forker", "fork")
    ring = locked_ring(work, cands, "arena",
                       limits={"output_gb": 0.02, "max_processes": 64, "memory_gb": 2,
                               "time_limit_min": 2, "threads": 1, "log_mb": 1})  # fmt: skip
    index = json.loads((ring / "nodes" / "index.json").read_text())
    nodes = {n["id"].split("-", 1)[1]: n["id"] for n in index["nodes"]}
    return {"ring": ring, "nodes": nodes, "targets": targets, "work": work}


def execute(arena, name, view="proxy", variant="s0", background=False):
    argv = [sys.executable, "-m", "ringflow", "step", "execute", str(arena["ring"]),
            arena["nodes"][name], view, variant]  # fmt: skip
    if background:
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return exec_dir(arena, name, view, variant)


def exec_dir(arena, name, view, variant) -> Path:
    return arena["ring"] / "nodes" / arena["nodes"][name] / "exec" / view / variant


def read(folder: Path, name: str) -> dict:
    return json.loads((folder / name).read_text())


@pytest.fixture(scope="module")
def snooped(arena):
    """The snoop on two views at once (concurrent executions), then view-blind."""
    both = [execute(arena, "snoop", view, background=True) for view in ("proxy", "x3")]
    for proc in both:
        proc.communicate(timeout=300)
        assert proc.returncode == 0
    real = exec_dir(arena, "snoop", "proxy", "s0")
    blind = execute(arena, "snoop", "proxy", "blind-s0")
    return {
        "proxy": read(real / "output", "attacks.json"),
        "x3": read(exec_dir(arena, "snoop", "x3", "s0") / "output", "attacks.json"),
        "blind": read(blind / "output", "attacks.json"),
        "score": read(real, "score.json"),
    }


def test_the_snoop_reads_nothing_but_its_inputs(snooped, arena):
    report = snooped["proxy"]
    home = arena["targets"].pop("home")
    for name in arena["targets"]:
        assert not report[name]["ok"], f"{name} was readable: {report[name]}"
    # Of a home folder, only the way to the program's environment shows (bound read-only).
    program_dirs = json.loads((arena["ring"] / "RING.json").read_text())["program"]["dirs"]
    way = {Path(d).relative_to(home).parts[0] for d in program_dirs if Path(d).is_relative_to(home)}
    assert not report["home"]["ok"] or set(report["home"]["value"]) <= way, report["home"]
    assert report["inputs"] == ["data.txt"]
    assert report["ringflow"] == ["inputs", "output", "solution"]
    assert snooped["score"]["valid"] and snooped["score"]["score"] == 0.5


def test_the_snoop_reaches_no_listener_on_loopback(snooped):
    for run in ("proxy", "x3", "blind"):
        assert not snooped[run]["tcp"]["ok"], snooped[run]["tcp"]


def test_concurrent_executions_cannot_see_or_read_each_other(snooped):
    for run in ("proxy", "x3"):
        report = snooped[run]
        # Its own PID namespace: the sandbox's init, the program, nothing of the other run.
        assert len(report["pids"]) <= 4, report["pids"]
        for key, outcome in report.items():
            if key.startswith("environ-") and outcome["ok"]:
                assert "data of" not in outcome["value"]


def test_a_blind_run_looks_like_a_real_one_from_inside(snooped, arena):
    real, blind = snooped["proxy"], snooped["blind"]
    assert set(real["env"]) == set(blind["env"])
    for report in (real, blind):
        assert re.fullmatch(r"view-[0-9a-f]{8}", report["env"]["RINGFLOW_VIEW"])
        assert report["cwd"] == "/ringflow/solution"
        seen = json.dumps(report["env"]) + report["mountinfo"] + report["cmdline1"]
        for word in ("proxy", "blind", "disguis", "nodes/", "/exec/", "SUPERVISION"):
            assert word not in seen, f"{word!r} visible from inside"
        assert str(arena["work"] / "task") not in seen
    assert real["env"]["RINGFLOW_VIEW"] != blind["env"]["RINGFLOW_VIEW"]

    def shape(text: str) -> str:
        text = re.sub(r"view-[0-9a-f]{8}", "VIEW", text)
        text = re.sub(r"\.boxes/[0-9a-f]{16}", ".boxes/BOX", text)
        return re.sub(r"\d+", "N", text)

    assert shape(real["mountinfo"]) == shape(blind["mountinfo"])
    assert shape(real["cmdline1"]) == shape(blind["cmdline1"])


def _mounts(mountinfo: str) -> list[tuple[str, ...]]:
    """Each mount as a program can compare it: point, options, type, source, super options
    (the ids and the root column, the bound folder's host path, left out)."""
    mounts = []
    for line in mountinfo.splitlines():
        fields, _, tail = line.partition(" - ")
        parts = fields.split()
        mounts.append((parts[4], parts[5], *tail.split()))
    return mounts


def test_a_blind_run_s_inputs_are_made_like_a_real_run_s(snooped):
    real, blind, other = snooped["proxy"]["made"], snooped["blind"]["made"], snooped["x3"]["made"]
    for key in ("listing", "inode_order", "nlink", "mode", "size", "owner", "folder_nlink"):
        assert real[key] == blind[key], f"{key}: real {real[key]} blind {blind[key]}"
    assert real["nlink"] == {"data.txt": 1}
    # Modification times are the view's own; the change time is the run's start, in both.
    assert real["mtime_ns"] == blind["mtime_ns"]
    for made in (real, blind, other):
        assert all(0 <= age < 120 for age in made["ctime_age"].values()), made["ctime_age"]
        assert 0 <= made["folder_ctime_age"] < 120
    assert _mounts(snooped["proxy"]["mountinfo"]) == _mounts(snooped["blind"]["mountinfo"])
    assert len(_mounts(snooped["proxy"]["mountinfo"])) > 5


def test_what_a_program_sees_names_no_ring_box_or_socket(snooped, arena):
    ring = arena["ring"]
    for run in ("proxy", "x3", "blind"):
        report = snooped[run]
        # Only the program's own environment is at its host path (docs/isolation.md).
        env = {k: v for k, v in report["env"].items() if k != "PATH"}
        for text in (json.dumps(env), report["cmdline1"]):
            for word in (ring.name, str(ring.parent), ".boxes", "rfq-", str(arena["work"])):
                assert word not in text, f"{word!r} in {text[:2000]}"
        for mount in _mounts(report["mountinfo"]):
            assert not any(ring.name in field or "boxes" in field for field in mount), mount
        # The root column shows where a bound folder lies: never in the ring's folder.
        roots = [line.split()[3] for line in report["mountinfo"].splitlines()]
        assert not any(f"/{ring.name}/" in root for root in roots), roots


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("linkabs", "is a symbolic link"),
        ("linkrel", "is a symbolic link"),
        ("devzero", "is a symbolic link"),
        ("fifo", "not a regular file (a FIFO)"),
    ],
)
def test_a_pointer_as_output_is_invalid_in_seconds_and_never_scored(arena, name, why):
    started = time.monotonic()
    folder = execute(arena, name)
    assert time.monotonic() - started < 60
    result, score = read(folder, "result.json"), read(folder, "score.json")
    assert result["status"] == "ok"
    assert score["valid"] is False and score["score"] is None and not score["scored"]
    assert why in score["reason"] and "output must be data" in score["reason"]
    assert not (folder / "scoring").exists(), "the scorer never ran"
    assert not (folder / "scorer.log").exists()


def test_filling_the_disk_past_the_quota_ends_the_execution(arena):
    folder = execute(arena, "filler")
    result = read(folder, "result.json")
    assert result["status"] == "crash" and not result["budget_cut"]
    assert "output limit exceeded" in result["reason"]
    assert sum(f.stat().st_size for f in (folder / "output").rglob("*") if f.is_file()) < 64 << 20


def test_forking_past_the_process_limit_ends_the_execution(arena):
    folder = execute(arena, "forker")
    result = read(folder, "result.json")
    assert result["status"] == "crash" and "process limit" in result["reason"]
    assert result["reap_left"] == []
