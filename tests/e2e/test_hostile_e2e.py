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

pytestmark = [pytest.mark.e2e, pytest.mark.sandbox, pytest.mark.user]
MAX_FILES = 300

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
elif kind == "badname":
    os.symlink("/dev/null", os.path.join(out.encode(), b"bad\xff\xfename"))
    open(os.path.join(out, "score.json"), "w").write('{"value": 0.5}')
elif kind == "deepout":
    fd = os.open(out, os.O_RDONLY)
    for _ in range(30):  # 6,000 characters of path: past PATH_MAX
        os.mkdir("d" * 200, dir_fd=fd)
        fd = os.open("d" * 200, os.O_RDONLY, dir_fd=fd)
    os.close(os.open(b"x\xff\nname", os.O_CREAT | os.O_WRONLY, dir_fd=fd))
    open(os.path.join(out, "score.json"), "w").write('{"value": 0.5}')
elif kind == "manyfiles":
    for i in range(b["files"]):
        open(os.path.join(out, f"f{i}"), "w").close()
    open(os.path.join(out, "score.json"), "w").write('{"value": 0.5}')
elif kind == "sparse":
    for i in range(12):  # each under the file-size limit, together far past output_gb
        with open(os.path.join(out, f"s{i}.bin"), "wb") as f:
            f.truncate(15 << 20)
    open(os.path.join(out, "score.json"), "w").write('{"value": 0.5}')
elif kind == "shm":
    import time
    held = bytearray(b["rss_mb"] << 20)
    for i in range(b["tmpfs_mb"] // 10):  # files under the file-size limit (RLIMIT_FSIZE)
        with open(f"{b['where']}-{i}", "wb") as f:
            f.write(b"1" * (10 << 20))
    time.sleep(60)
elif kind == "progress":
    progress = os.environ["RINGFLOW_PROGRESS_FILE"]
    open(progress, "w").write("[" * 100000 + "]" * 100000)
    import time
    time.sleep(1.5)  # sampled at least once
    open(os.path.join(out, "score.json"), "w").write('{"value": 0.5}')
elif kind == "escapes":
    sys.stderr.write("\x1b[2J\x1b]0;pwned\x07\x1b[31mred alert\u202e\n")
    sys.exit(3)
elif kind == "ptrace":
    import ctypes, time
    libc = ctypes.CDLL(None, use_errno=True)
    rc = libc.ptrace(16, 1, 0, 0)  # PTRACE_ATTACH to the sandbox's PID 1
    report = {"rc": rc, "errno": ctypes.get_errno()}
    status = dict(line.split(":\t", 1) for line in open("/proc/1/status").read().splitlines()
                  if ":\t" in line)
    report["pid1_caps"] = [status.get(k, "").strip() for k in ("CapEff", "CapPrm")]
    open(os.path.join(out, "ptrace.json"), "w").write(json.dumps(report))
    open(os.path.join(out, "score.json"), "w").write('{"value": 0.5}')
    time.sleep(1)
elif kind == "daemon":
    import time
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(60)
        os._exit(0)
    open(os.path.join(out, "score.json"), "w").write('{"value": 0.5}')
    time.sleep(6)  # past the supervisor's first samples (exec_health.collect_s, 5 s)
elif kind == "fork":
    import subprocess, sys, time
    kids = []
    for _ in range(500):
        try:
            kids.append(subprocess.Popen(["sleep", "60"]))
        except OSError:
            print(len(kids), "children when a fork was refused", flush=True)
            sys.exit(1)
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
    hostile(cands / "daemon", "daemon")
    hostile(cands / "badname", "badname")
    hostile(cands / "deepout", "deepout")
    hostile(cands / "manyfiles", "manyfiles", files=MAX_FILES + 1)
    hostile(cands / "sparse", "sparse")
    hostile(cands / "shm", "shm", where="/dev/shm/held", rss_mb=100, tmpfs_mb=200)
    hostile(cands / "tmp", "shm", where="/tmp/held", rss_mb=100, tmpfs_mb=200)
    hostile(cands / "progress", "progress")
    hostile(cands / "escapes", "escapes")
    hostile(cands / "ptrace", "ptrace")
    ring = locked_ring(work, cands, "arena",
                       limits={"output_gb": 0.02, "max_processes": 64, "memory_gb": 2,
                               "time_limit_min": 2, "threads": 1, "log_mb": 1,
                               "output_files": MAX_FILES},
                       # A traced PID 1 may stall its run until the view's time limit:
                       # the ptrace probe runs where that limit is short.
                       limits_per_view={"final": {"memory_gb": 0.25},
                                        "x3": {"time_limit_min": 0.5}})  # fmt: skip
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


def test_a_fork_past_the_process_limit_is_refused_and_the_program_decides(arena):
    # The kernel refuses the fork (pids.max as root, RLIMIT_NPROC in the run's namespace);
    # this program gives up, and its children are stopped with it.
    folder = execute(arena, "forker")
    result = read(folder, "result.json")
    assert result["status"] == "crash" and result["reap_left"] == []
    assert result["reason"].endswith("exited with code 1")
    held = result["limits"]["max_processes"]
    if held["enforced"]:  # a pids cgroup counts what it refused
        assert result["reason"].startswith("process limit reached: the kernel refused ")
        assert held["refused"] >= 1


def test_a_daemon_is_stopped_with_its_run_and_recorded(arena):
    # It would outlive the program deployed elsewhere: the record says it left its session.
    folder = execute(arena, "daemon")
    result = read(folder, "result.json")
    assert result["status"] == "ok" and result["reap_left"] == []
    (own,) = [e for e in result["events"] if e["event"] == "own_session"]
    assert own["count"] >= 1 and len(own["processes"]) == min(own["count"], 10)


def test_a_name_that_is_not_utf8_makes_the_output_invalid_with_the_name_escaped(arena):
    folder = execute(arena, "badname")
    result, score = read(folder, "result.json"), read(folder, "score.json")
    assert result["status"] == "ok"
    assert score["valid"] is False and "bad\\xff\\xfename" in score["reason"]
    assert "is a symbolic link" in score["reason"]


def test_an_output_deeper_than_path_max_is_read_and_removed(arena):
    folder = execute(arena, "deepout")
    result, score = read(folder, "result.json"), read(folder, "score.json")
    assert result["status"] == "ok", result["reason"]
    assert score["valid"] and score["score"] == 0.5  # deep is allowed: it is plain data
    execute(arena, "deepout")  # the run again: its old output is removed first
    assert read(folder, "result.json")["status"] == "ok"


@pytest.mark.parametrize(("name", "why"), [
    ("manyfiles", "output file limit exceeded"),
    ("sparse", "output limit exceeded"),
])  # fmt: skip
def test_output_past_its_limits_fails_the_run_and_is_not_kept(arena, name, why):
    folder = execute(arena, name)
    result = read(folder, "result.json")
    assert result["status"] == "crash" and why in result["reason"], result["reason"]
    assert list((folder / "output").iterdir()) == []


@pytest.mark.parametrize("name", ["shm", "tmp"])
def test_the_private_tmpfs_counts_as_memory(arena, name):
    folder = execute(arena, name, view="final")
    result = read(folder, "result.json")
    assert result["status"] == "crash", result["reason"]
    memory = result["limits"]["memory"]
    if memory.get("best_effort"):  # no memory cgroup: the supervisor's own count
        assert "memory limit (ringflow's" in result["reason"]
        assert "in the sandbox's /tmp and /dev/shm" in result["reason"]
    else:  # the cgroup charges tmpfs pages to the tree: a kill, or a write refused
        killed = any(e["event"] == "oom_kill" for e in result["events"]) or result["signal"]
        assert killed or result["exit_code"] not in (0, None)


def test_a_deeply_nested_progress_file_never_fails_a_health_sample(arena):
    folder = execute(arena, "progress")
    result = read(folder, "result.json")
    assert result["status"] == "ok", result["reason"]
    assert not [e for e in result["events"] if e["event"] == "sample_failed"]


def test_escape_sequences_from_a_program_never_reach_the_terminal(arena):
    from ringflow.reporting.status import render_status

    folder = execute(arena, "escapes")
    result = read(folder, "result.json")
    assert result["status"] == "crash"
    shown = render_status(arena["ring"])
    assert "\x1b" not in shown and "\x07" not in shown and "\u202e" not in shown
    assert "red alert" in shown and "\\x1b[31m" in shown


def test_ptrace_of_the_sandboxs_pid_1_is_denied_or_stalls_only_its_own_run(arena):
    folder = execute(arena, "ptrace", view="x3")
    result = read(folder, "result.json")
    attempt = read(folder / "output", "ptrace.json")
    if attempt["rc"] != 0:
        assert attempt["errno"] in (1, 13)  # EPERM, EACCES: denied
        assert result["status"] == "ok"
    else:  # attached: the run may stall until its own time limit, and is then reaped
        assert result["status"] in ("ok", "timeout"), result["reason"]
        assert result["reap_left"] == []
        # Harmless: PID 1 holds no capability, so a tracer gains nothing it lacks.
        assert attempt["pid1_caps"] == ["0000000000000000"] * 2


def test_a_ring_with_hostile_nodes_finishes_and_the_others_are_unaffected(tmp_path):
    from ringtools import make_candidate, make_task, snakemake, write_config

    make_task(tmp_path)
    cands = tmp_path / "cands"
    make_candidate(cands / "good", mean=0.7, sd=0.01)
    hostile(cands / "badname", "badname")
    hostile(cands / "deepout", "deepout")
    hostile(cands / "manyfiles", "manyfiles", files=MAX_FILES + 1)
    hostile(cands / "escapes", "escapes")
    config = write_config(tmp_path, ring_id="hostile-ring", task=str(tmp_path / "task"),
                          candidates=str(cands), baseline=None,
                          limits={"output_files": MAX_FILES, "output_gb": 0.02})  # fmt: skip
    snakemake(tmp_path, config)  # finishes: a failing ring raises with its log
    ring = tmp_path / "runs" / "hostile-ring"
    index = json.loads((ring / "nodes" / "index.json").read_text())
    nodes = {n["id"].split("-", 1)[1]: n["id"] for n in index["nodes"]}

    def s0(name: str) -> tuple[dict, dict | None]:
        folder = ring / "nodes" / nodes[name] / "exec" / "proxy" / "s0"
        score = folder / "score.json"
        return read(folder, "result.json"), read(folder, "score.json") if score.exists() else None

    result, score = s0("badname")
    assert result["status"] == "ok" and not score["valid"] and "\\xff\\xfe" in score["reason"]
    result, score = s0("deepout")
    assert result["status"] == "ok" and score["valid"]
    result, _ = s0("manyfiles")
    assert result["status"] == "crash" and "output file limit exceeded" in result["reason"]
    result, _ = s0("escapes")
    assert result["status"] == "crash"
    result, score = s0("good")
    assert result["status"] == "ok" and score["valid"] and score["score"] > 0.5
    summary = (ring / "summary.txt").read_text()
    assert "\x1b" not in summary and "\x07" not in summary
    assert "red alert" in summary  # the failure digest shows it, escaped
    assert read(ring / "selection", "decision.json")["decision"]  # final selection was reached
    failures = summary.split("failures:", 1)[1].split("final decision", 1)[0]
    assert nodes["good"] not in failures and nodes["deepout"] not in failures
    assert all(nodes[name] in failures for name in ("badname", "manyfiles", "escapes"))
