"""Rings through profiles/slurm against a real SLURM controller (docs/slurm.md): the
one-node cluster of scripts/slurm-up.sh, as `make test-slurm` brings it up. Root only; each
test skips, saying why, where no controller answers or the SLURM plugin is not installed
(the plugin lives in .venv-slurm/, never in the default environment)."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import psutil
import pytest

from ringflow.cluster.jobs import ring_jobs
from ringflow.cluster.slurm import controller_problem
from ringflow.core.clock import load_ring
from ringflow.core.layout import RingLayout
from ringflow.selection.timekeeper import stage_of
from ringtools import REPO, SNAKEMAKE, make_candidate, make_task, results, write_config
from slurmtools import driver_log, noticed

pytestmark = [pytest.mark.slurm, pytest.mark.e2e]


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root (the one-node SLURM runs jobs as root)"
    return controller_problem()


@pytest.fixture(scope="module", autouse=True)
def controller():
    why = _why_not()
    if why:
        pytest.skip(why)


def test_the_plugin_counts_a_preempted_job_as_running_which_the_driver_corrects():
    """ringflow.workflow.preemption reports a preempted job failed because the plugin keeps
    it among the running (it expects SLURM to requeue it, which --no-requeue forbids) and
    warns once; should the plugin change its reading, this says so."""
    import inspect

    from snakemake_executor_plugin_slurm import Executor

    source = inspect.getsource(Executor.check_active_jobs)
    start = source.index("fail_stati = (")
    assert "PREEMPTED" not in source[start : source.index(")", start)]
    assert 'status == "PREEMPTED" and not self._preemption_warning' in source


def test_the_plugin_wraps_the_command_the_driver_gives_each_job():
    """ringflow.workflow.direct_jobs gives a job its own command through the plugin's
    format_job_exec, and has the plugin submit it as a script on sbatch's standard input
    (pass_command_as_script), not through --wrap, whose escaping (double quotes only) would
    hand a `$` to the submitting shell; should the plugin change either, this says so."""
    import inspect

    from snakemake_executor_plugin_slurm import Executor, ExecutorSettings

    source = inspect.getsource(Executor.run_job)
    assert "exec_job = self.format_job_exec(job)" in source
    assert """exec_job.replace('"', '\\\\"')""" in source
    assert "call += f' --wrap=\"{exec_job_escaped}\"'" in source
    assert "if not self.workflow.executor_settings.pass_command_as_script:" in source
    assert 'sbatch_script = "\\n".join(["#!/bin/sh", exec_job])' in source
    assert 'call += " /dev/stdin"' in source
    assert ExecutorSettings().pass_command_as_script is False  # the driver turns it on


def slurm_argv(tmp_path: Path, ring_id: str, *extra: str, configfile: Path | None = None,
               options: tuple[str, ...] = ()) -> list[str]:  # fmt: skip
    """A ring's command through profiles/slurm from the repository root, its folders under
    tmp_path: `extra` configuration entries (KEY=VALUE), and Snakemake `options` before
    --configfile (which takes every word that follows it)."""
    return [str(SNAKEMAKE), "--profile", "profiles/slurm", *options,
            "--configfile", str(configfile or REPO / "config" / "quick.yaml"),
            "--config", f"ring_id={ring_id}", f"runs_dir={tmp_path}/runs",
            f"store={tmp_path}/store", f"resources_dir={tmp_path}/resources", *extra]  # fmt: skip


def slurm_ring(tmp_path: Path, ring_id: str, *extra: str, configfile: Path | None = None,
               options: tuple[str, ...] = (),
               timeout: float = 900) -> tuple[subprocess.CompletedProcess, float]:  # fmt: skip
    """A ring through profiles/slurm from the repository root, its folders under tmp_path."""
    argv = slurm_argv(tmp_path, ring_id, *extra, configfile=configfile, options=options)
    start = time.monotonic()
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    return done, time.monotonic() - start


def sacct_jobs(prefix: str) -> list[dict]:
    """Every job of this cluster's accounting whose name starts with `prefix`."""
    done = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-S", "now-1days", "-o",
         "JobID,JobName%100,State,ElapsedRaw,End,AllocTRES%200,Comment%300"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    jobs = []
    for line in done.stdout.splitlines():
        job_id, name, state, elapsed, end, tres, comment = [*line.split("|"), *[""] * 7][:7]
        gpus = dict(kv.split("=", 1) for kv in tres.split(",") if "=" in kv).get("gres/gpu", 0)
        ended = datetime.fromisoformat(end).timestamp() if end[:1].isdigit() else None
        if name.startswith(prefix):
            jobs.append({"id": job_id, "name": name, "state": state, "comment": comment,
                         "elapsed_s": int(elapsed or 0), "ended_at": ended,
                         "gpus": int(gpus)})  # fmt: skip
    return jobs


def settled_jobs(prefix: str, count: int, timeout: float = 60) -> list[dict]:
    """sacct_jobs, once `count` jobs have ended there: accounting follows a job's end by a
    few seconds."""
    deadline = time.monotonic() + timeout
    while True:
        jobs = sacct_jobs(prefix)
        ended = [j for j in jobs if j["state"] not in ("PENDING", "RUNNING", "COMPLETING")]
        if len(ended) >= count or time.monotonic() > deadline:
            return jobs
        time.sleep(1)


def jobs_with_ids(prefix: str, ids: set[str], timeout: float = 60) -> dict[str, dict]:
    """sacct_jobs by id, once every one of `ids` is in the accounting: slurmdbd records a
    job a few seconds after it ends."""
    deadline = time.monotonic() + timeout
    while True:
        jobs = {j["id"]: j for j in sacct_jobs(prefix)}
        if ids <= set(jobs) or time.monotonic() > deadline:
            return jobs
        time.sleep(1)


def test_the_quick_ring_reaches_final_with_every_execution_a_named_slurm_job(tmp_path):
    ring_id = f"sq-{os.getpid()}"
    # The ring, its store and resources under a name the submitting shell would read: the
    # jobs' commands reach SLURM as scripts, as written (docs/slurm.md#what-a-job-runs).
    base = tmp_path / "a ring's $HOME `id`"
    base.mkdir()
    done, seconds = slurm_ring(base, ring_id)
    print(f"quick ring on SLURM: {seconds:.0f} s")
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-6000:])
    assert [p.name for p in tmp_path.iterdir()] == [base.name]  # nothing made elsewhere
    ring = base / "runs" / ring_id
    final = json.loads((ring / "final" / "FINAL.json").read_text())
    assert final["decision"] and final["chosen"]
    executions = results(ring)
    assert executions
    # Every execution is one job named after the ring, COMPLETED, with its rule and
    # wildcards in the comment; no bookkeeping step left the driver.
    jobs = [j for j in sacct_jobs(f"ringflow-{ring_id}_") if j["comment"]]
    comments = sorted(j["comment"] for j in jobs)
    assert all(c.startswith("rule_execute_wildcards_") for c in comments), comments
    assert {j["state"] for j in jobs} == {"COMPLETED"}, jobs
    assert len(jobs) == len(executions)
    for node, view, variant in executions:
        assert any(node in c and view in c and variant in c for c in comments), (node, view)
    # The driver noticed each job's end within seconds (docs/slurm.md#polling): it asks
    # SLURM once a job's outputs are written, not after the plugin's growing wait (7 s in
    # the median, 12 s at most, before it did).
    log = driver_log(REPO, ring_id)
    assert log is not None, ring_id
    seen = noticed(log)
    late = sorted(seen[j["id"]] - j["ended_at"] for j in jobs if j["id"] in seen and j["ended_at"])
    assert len(late) == len(jobs), (len(late), len(jobs))
    assert statistics.median(late) <= 3 and late[-1] <= 10, late
    # Their SLURM logs stay in the ring's folder, also after success; each job ran its
    # step itself, odd folder name and all.
    logs = list((ring / "logs" / "slurm").rglob("*.log"))
    assert len(logs) == len(jobs)
    for log in logs:
        assert log.read_text().startswith("ringflow: rule execute node="), log
    assert (ring / "cluster.json").is_file()
    # The reserve counts what the partition holds at once (2 CPUs, 1 thread each), not
    # the profile's 50 jobs.
    assert json.loads((ring / "slots.json").read_text())["cluster_slots"] == 2
    # What a stage of final selection took counts its jobs whole, from submission to end,
    # not only the runs inside them (docs/slurm.md#the-reserve).
    timing = json.loads((ring / "final_timing.json").read_text())
    took = {s["stage"]: s["actual_s"] for s in timing["stages"] if s["executions"]}
    by_id = {j["id"]: j for j in sacct_jobs(f"ringflow-{ring_id}_")}
    locked = load_ring(ring)
    for (_node, view, variant), record in executions.items():
        stage = stage_of(locked, view, variant)
        job = by_id.get(record["slurm_job_id"])
        if stage in took and job is not None:
            assert took[stage] >= job["elapsed_s"] - 1, (stage, took, job)


def test_a_ring_no_node_can_run_is_refused_at_the_lock(tmp_path):
    config = tmp_path / "big.yaml"
    quick = (REPO / "config" / "quick.yaml").read_text()
    config.write_text(quick.replace("threads: 1", "threads: 512"))
    ring_id = f"sq-big-{os.getpid()}"
    done, _seconds = slurm_ring(tmp_path, ring_id, configfile=config, timeout=300)
    said = done.stdout + done.stderr
    assert done.returncode != 0
    assert "no node of SLURM partition debug can run the ring's executions" in said, said[-3000:]
    assert "set limits.threads to at most" in said
    assert "its largest node" in said
    assert not (tmp_path / "runs" / ring_id / "RING.json").exists()
    assert sacct_jobs(f"ringflow-{ring_id}_") == []
    # No node holds one of its executions.
    slots = json.loads((tmp_path / "runs" / ring_id / "slots.json").read_text())
    assert slots["cluster_slots"] == 0


def test_check_with_the_profile_refuses_the_default_limits(tmp_path):
    task = make_task(tmp_path)
    make_candidate(tmp_path / "cands" / "a", mean=0.6)
    done = subprocess.run(
        [str(SNAKEMAKE.parent / "ringflow"), "check", str(task), str(tmp_path / "cands"),
         "--no-run", "--profile", "profiles/slurm"],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "no node of SLURM partition debug can run" in done.stdout
    quick = subprocess.run(
        [str(SNAKEMAKE.parent / "ringflow"), "check", str(task), str(tmp_path / "cands"),
         "--no-run", "--profile", "profiles/slurm", "--configfile", "config/quick.yaml"],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert "a node can run every execution the ring asks for" in quick.stdout, quick.stdout
    # The probe job looked at the node: sandbox, interpreter, folders shared.
    assert "compute node " in quick.stdout and "shared with this machine" in quick.stdout
    assert quick.returncode == 0, quick.stdout


def test_a_node_where_the_candidates_python_does_not_run_is_refused_at_the_lock(tmp_path):
    # An interpreter that runs on the driver and fails inside a SLURM job: the lock's
    # probe job finds it on the node, and no execution is submitted.
    python = tmp_path / "python"
    python.write_text(
        "#!/bin/sh\n"
        '[ -n "$SLURM_JOB_ID" ] && { echo "no such library here" >&2; exit 3; }\n'
        f'exec {REPO / ".venv-program" / "bin" / "python"} "$@"\n'
    )
    python.chmod(0o755)
    ring_id = f"sq-node-{os.getpid()}"
    done, _seconds = slurm_ring(tmp_path, ring_id, f"program={{'python': '{python}'}}",
                                timeout=300)  # fmt: skip
    said = done.stdout + done.stderr
    assert done.returncode != 0
    assert "a compute node cannot run the ring's executions" in said, said[-3000:]
    assert "program.python on " in said and "no such library here" in said
    assert not (tmp_path / "runs" / ring_id / "RING.json").exists()
    probe = [f"ringflow-{ring_id}_node-probe"]
    assert [j["name"] for j in settled_jobs(f"ringflow-{ring_id}_", len(probe))] == probe


def test_two_slurm_jobs_racing_for_one_weights_key_train_once_and_replay(tmp_path):
    # The store's key lock across SLURM jobs: both jobs run at once on the node (1 CPU
    # each), start together, and exactly one trains while the other replays its weights.
    from test_store import KEY, RACER, TREE, race_ends

    name, go = f"ringflow-race-{os.getpid()}", tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}

    def submit(racer: str) -> subprocess.Popen:
        argv = ["srun", "--ntasks=1", "--cpus-per-task=1", "--mem=512M", "--time=5",
                f"--job-name={name}", sys.executable, "-c", RACER, str(tmp_path / "store"),
                TREE, KEY, str(tmp_path / racer), str(go), racer]  # fmt: skip
        return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env, cwd=tmp_path)

    racers = [submit(racer) for racer in ("alpha", "bravo")]
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            running = subprocess.run(["squeue", "-h", "-t", "RUNNING", f"--name={name}"],
                                     capture_output=True, text=True, timeout=30)  # fmt: skip
            if len(running.stdout.splitlines()) == 2:
                break
            time.sleep(0.5)
        time.sleep(1.0)  # both interpreters started and polling for the signal
        go.touch()
        race_ends(racers, timeout=120)
    finally:
        for racer in racers:
            if racer.poll() is None:
                racer.terminate()
    assert [j["state"] for j in settled_jobs(name, 2)] == ["COMPLETED", "COMPLETED"]


# ---- job ids, the driver's stop and SLURM's kills (docs/slurm.md#job-ids-signals-and-kills)


def slow_ring(tmp_path: Path, ring_id: str, sleep_s: float, views=("proxy", "x3", "final")) -> Path:
    """The configuration of a ring over the scripted task whose candidate `slow` sleeps
    `sleep_s` in each seed-0 run (its --ablate control too), beside a quick `fast`; no
    baseline, no guard."""
    return scripted_ring(tmp_path, ring_id, "slow", views, seed_sleep={"0": sleep_s})


def scripted_ring(tmp_path: Path, ring_id: str, name: str, views, **behaviour) -> Path:
    """A ring over the scripted task: candidate `name` with `behaviour`, beside a quick
    `fast`; no baseline, no guard."""
    make_task(tmp_path, views=views)
    make_candidate(tmp_path / "cands" / name, mean=0.7, **behaviour)
    make_candidate(tmp_path / "cands" / "fast", mean=0.6)
    guard = {"enabled": False, "seeds": 5, "alpha": 0.05, "margin": 0.0}
    return write_config(tmp_path, ring_id=ring_id, task=str(tmp_path / "task"),
                        candidates=str(tmp_path / "cands"), baseline=None, promote_top_k=1,
                        guard=guard)  # fmt: skip


def queued(prefix: str) -> list[str]:
    """SLURM's jobs (any state it still holds but ended) whose name starts with `prefix`."""
    done = subprocess.run(["squeue", "-h", "-o", "%i|%j|%T"], capture_output=True, text=True,
                          timeout=60, check=True)  # fmt: skip
    return [
        line for line in done.stdout.splitlines()
        if line.split("|")[1].startswith(prefix)
        and line.split("|")[2] not in ("CANCELLED", "COMPLETED", "TIMEOUT", "FAILED")
    ]  # fmt: skip


def wait_for(what, timeout: float, step: float = 1.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = what()
        if found:
            return found
        time.sleep(step)
    return None


def ring_processes(tmp_path: Path) -> list[str]:
    """Processes of the ring's run: anything naming its folders, or a candidate's program."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        line = " ".join(proc.info["cmdline"] or [])
        if str(tmp_path) in line or ("run.py" in line and "--seed" in line):
            found.append(f"{proc.info['pid']}: {line[:200]}")
    return found


def start_driver(tmp_path: Path, argv: list[str]):
    """The ring's driver in a session of its own, its output in tmp_path/driver.log: the
    process, the open log, and what the log's end says (for assertion messages)."""
    log = (tmp_path / "driver.log").open("a")
    driver = subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)  # fmt: skip
    return driver, log, lambda: (tmp_path / "driver.log").read_text()[-4000:]


def stop_driver(driver, log, ring_id: str) -> None:
    """Whatever a test found: its driver stopped (SIGTERM, SIGKILL a minute later) and no
    job of its ring left in SLURM (cancelled by id)."""
    if driver.poll() is None:
        driver.send_signal(signal.SIGTERM)
        try:
            driver.wait(timeout=60)
        except subprocess.TimeoutExpired:
            driver.kill()
    left = [line.split("|")[0] for line in queued(f"ringflow-{ring_id}_")]
    if left:
        subprocess.run(["scancel", *left], check=False, timeout=60)
    log.close()


def events_of(ring: Path) -> list[dict]:
    return [json.loads(x) for x in (ring / "events.jsonl").read_text().splitlines()]


def killed_event(ring: Path, job: str, timeout: float = 60):
    """The ring's `slurm_job_killed` event for `job`, once it is on record: the driver
    appends it after the job's record, once the run is scored and its boxes removed."""

    def killed():
        return [e for e in events_of(ring) if e["kind"] == "slurm_job_killed" and e["job"] == job]

    return wait_for(killed, timeout)


def listed(ring: Path, part: str, variant: str = "s0") -> list[dict]:
    return [j for j in ring_jobs(ring) if part in j["node"] and j["variant"] == variant]


def test_sigterm_cancels_the_rings_jobs_by_id_and_a_job_cancelled_from_outside_is_recorded(
    tmp_path,
):
    ring_id = f"sq-term-{os.getpid()}"
    ring = tmp_path / "runs" / ring_id
    config = slow_ring(tmp_path, ring_id, sleep_s=300)
    driver, log, said = start_driver(tmp_path, slurm_argv(tmp_path, ring_id, configfile=config))
    try:
        # The slow candidate's seed 0 runs, its job on record as it started.
        slow = wait_for(lambda: listed(ring, "slow"), 180)
        assert slow, said()
        job = slow[0]["job"]
        # Submitted with --no-requeue: preempted or on a failed node, it ends (and is
        # recorded) rather than starting again under the same id.
        shown = subprocess.run(["scontrol", "show", "job", job], capture_output=True,
                               text=True, timeout=60, check=True).stdout  # fmt: skip
        assert "Requeue=0" in shown.split(), shown
        # SLURM ends it from outside (scancel by id, as an administrator would): the
        # driver records it and the ring goes on.
        subprocess.run(["scancel", job], check=True, timeout=60)
        result_path = RingLayout(ring).result(slow[0]["node"], slow[0]["view"], "s0")
        assert wait_for(result_path.exists, 90), said()
        result = json.loads(result_path.read_text())
        assert result["slurm_job_id"] == job
        assert result["status"] == "interrupted" and result["slurm_state"] == "CANCELLED"
        assert f"SLURM ended job {job} with CANCELLED" in result["reason"]
        assert driver.poll() is None, said()
        # The driver's own bookkeeping steps run in its resident step server
        # (docs/architecture.md#resident-steps); the executions, as SLURM jobs, never ask it.
        servers = [p for p in psutil.Process(driver.pid).children()
                   if "ringflow.workflow.resident_steps" in " ".join(p.cmdline())]  # fmt: skip
        assert len(servers) == 1, said()
        # Jobs are in flight (the ablation of `slow` sleeps too; others pend behind it).
        assert wait_for(lambda: len(queued(f"ringflow-{ring_id}_")) >= 2, 90), said()
        before = queued(f"ringflow-{ring_id}_")
        driver.send_signal(signal.SIGTERM)
        start = time.monotonic()
        driver.wait(timeout=30)
        left = 30 - (time.monotonic() - start)
        gone = wait_for(lambda: not queued(f"ringflow-{ring_id}_")
                        and not ring_processes(tmp_path), left, 0.5)  # fmt: skip
        seconds = time.monotonic() - start
        print(f"SIGTERM: driver, jobs and processes gone in {seconds:.1f} s ({before})")
        assert gone, (queued(f"ringflow-{ring_id}_"), ring_processes(tmp_path), said())
        assert not servers[0].is_running(), "the resident step server outlived its driver"
        events = [json.loads(x) for x in (ring / "events.jsonl").read_text().splitlines()]
        cancelled = [e for e in events if e["kind"] == "slurm_jobs_cancelled"]
        assert cancelled and cancelled[0]["signal"] == "SIGTERM", said()
        ids = {line.split("|")[0] for line in before}
        assert ids <= set(cancelled[0]["jobs"]), (ids, cancelled)
        assert any(e["kind"] == "slurm_job_killed" and e["job"] == job for e in events)
    finally:
        if driver.poll() is None:
            driver.kill()
        # Whatever failed, no job of this ring outlives the test (by id).
        left = [line.split("|")[0] for line in queued(f"ringflow-{ring_id}_")]
        if left:
            subprocess.run(["scancel", *left], check=False, timeout=60)
        log.close()


def test_a_preempted_job_is_recorded_and_the_ring_goes_on(tmp_path):
    ring_id = f"sq-preempt-{os.getpid()}"
    ring = tmp_path / "runs" / ring_id
    config = slow_ring(tmp_path, ring_id, sleep_s=300)
    driver, log, said = start_driver(tmp_path, slurm_argv(tmp_path, ring_id, configfile=config))
    urgent = None
    try:
        slow = wait_for(lambda: listed(ring, "slow"), 180)
        assert slow, said()
        job = slow[0]["job"]
        # A job of the `urgent` partition needs the whole node: SLURM preempts the ring's
        # running jobs to make room and, as they may not be requeued, ends them PREEMPTED.
        urgent = subprocess.run(
            ["sbatch", "--parsable", "-p", "urgent", "-J", f"urgent-{ring_id}", "-c",
             str(os.cpu_count()), "--mem=500", "-o", "/dev/null", "--wrap", "sleep 600"],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout.strip().split(";")[0]  # fmt: skip
        result_path = RingLayout(ring).result(slow[0]["node"], slow[0]["view"], "s0")
        assert wait_for(result_path.exists, 150), said()
        result = json.loads(result_path.read_text())
        assert result["slurm_job_id"] == job, result
        assert result["status"] == "interrupted" and result["slurm_state"] == "PREEMPTED", result
        assert f"SLURM ended job {job} with PREEMPTED" in result["reason"]
        assert driver.poll() is None, said()
        assert killed_event(ring, job), said()
    finally:
        if urgent:
            subprocess.run(["scancel", urgent], check=False, timeout=60)
        stop_driver(driver, log, ring_id)


def ring_to_final(tmp_path: Path, ring_id: str, config: Path, options: tuple[str, ...],
                  name: str, what: str) -> tuple[list[dict], list[dict]]:  # fmt: skip
    """Run a scripted ring through profiles/slurm to final/; the records of candidate
    `name`'s two seed-0 runs, and every other record."""
    ring = tmp_path / "runs" / ring_id
    done, seconds = slurm_ring(tmp_path, ring_id, options=options, configfile=config, timeout=900)
    print(f"ring with {what}: {seconds:.0f} s")
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-6000:])
    assert (ring / "final" / "FINAL.json").is_file()
    named = [r for k, r in results(ring).items() if name in k[0]]
    assert len(named) == 2, results(ring)
    return named, [r for r in results(ring).values() if r not in named]


def test_quick_ring_with_a_job_slurm_kills_for_time_records_it_and_goes_on(tmp_path):
    ring_id = f"sq-time-{os.getpid()}"
    config = slow_ring(tmp_path, ring_id, sleep_s=200, views=("proxy", "final"))
    # SLURM's limit below ringflow's own, so that SLURM's fires first.
    start = time.monotonic()
    limit = ("--set-resources", "execute:runtime=1")
    slow, others = ring_to_final(tmp_path, ring_id, config, limit, "slow",
                                 "a job SLURM ended for time")  # fmt: skip
    # Seed 0 of `slow` and its --ablate control outlived SLURM's limit.
    for record in slow:
        assert record["status"] == "interrupted" and record["slurm_state"] == "TIMEOUT", record
        assert "TIMEOUT" in record["reason"] and record["slurm_job_id"]
    # Every other execution ran in its job to the end, its job id on record.
    assert others and all(r["slurm_job_id"] and "slurm_state" not in r for r in others)
    assert time.monotonic() - start < 900
    assert not list((tmp_path / "runs" / ".boxes").glob("*"))


def test_a_job_over_slurms_memory_is_recorded_as_a_memory_kill_and_the_ring_goes_on(tmp_path):
    ring_id = f"sq-mem-{os.getpid()}"
    # Seed 0 of `hog` (and its --ablate control) writes 1.5 GB: over the 1 GB SLURM gives
    # each execution job here, under ringflow's own limits.memory_gb.
    config = scripted_ring(tmp_path, ring_id, "hog", ("proxy", "final"),
                           seed_hog_mb={"0": 1536})  # fmt: skip
    limit = ("--set-resources", "execute:mem_mb=1024")
    hog, others = ring_to_final(tmp_path, ring_id, config, limit, "hog",
                                "a job over SLURM's memory")  # fmt: skip
    for record in hog:
        # A crash of the candidate's, naming the limit it met: SLURM's, not ringflow's.
        assert record["status"] == "crash", record
        assert "memory limit (SLURM's" in record["reason"], record["reason"]
        assert record["slurm_job_id"]
    assert others and all(r["status"] == "ok" for r in others), others
    assert not list((tmp_path / "runs" / ".boxes").glob("*"))


def test_sigterm_while_the_locks_probe_job_pends_cancels_it(tmp_path):
    ring_id = f"sq-probe-{os.getpid()}"
    # Another user's work holds both CPUs of the node, so the probe job pends.
    blocker = subprocess.run(
        ["sbatch", "--parsable", "-c", "2", "--mem=1G", "--time=5",
         f"--job-name=blocker-{os.getpid()}", f"--output={tmp_path}/blocker.out",
         "--wrap", "sleep 300"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout.strip().split(";")[0]  # fmt: skip
    driver, log, said = start_driver(tmp_path, slurm_argv(tmp_path, ring_id))
    probe = f"ringflow-{ring_id}_node-probe"
    try:
        assert wait_for(lambda: queued(probe), 120), said()
        driver.send_signal(signal.SIGTERM)
        start = time.monotonic()
        driver.wait(timeout=30)
        gone = wait_for(lambda: not queued(probe), 30 - (time.monotonic() - start), 0.5)
        print(f"SIGTERM during the probe: driver and probe job gone in "
              f"{time.monotonic() - start:.1f} s")  # fmt: skip
        assert gone, (queued(probe), said())
        # Anywhere in the driver's output: Snakemake's report of the failed lock follows it.
        assert "the probe job was cancelled" in (tmp_path / "driver.log").read_text(), said()
    finally:
        if driver.poll() is None:
            driver.kill()
        left = [line.split("|")[0] for line in queued(probe)]
        subprocess.run(["scancel", blocker, *left], check=False, timeout=60)
        log.close()


def test_a_job_slurm_ends_while_no_driver_runs_is_recorded_when_the_driver_comes_back(tmp_path):
    ring_id = f"sq-away-{os.getpid()}"
    ring = tmp_path / "runs" / ring_id
    config = slow_ring(tmp_path, ring_id, sleep_s=300, views=("proxy", "final"))
    argv = slurm_argv(tmp_path, ring_id, configfile=config)
    driver, log, said = start_driver(tmp_path, argv)
    try:
        slow = wait_for(lambda: listed(ring, "slow"), 180)
        assert slow, said()
        job = slow[0]["job"]
        # The driver dies without a word (its jobs run on); then SLURM ends one of them.
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
        subprocess.run(["scancel", job], check=True, timeout=60)
        assert wait_for(
            lambda: job not in [q.split("|")[0] for q in queued(f"ringflow-{ring_id}_")], 60
        )
        result_path = RingLayout(ring).result(slow[0]["node"], slow[0]["view"], "s0")
        assert not result_path.exists()
        # The dead driver's other jobs pend or run on (seed 0's --ablate control sleeps too).
        left = [q.split("|")[0] for q in queued(f"ringflow-{ring_id}_")]
        assert left
        # The driver again (Snakemake's lock of the dead one removed first): its start
        # records what SLURM did meanwhile.
        subprocess.run([*argv, "--unlock"], cwd=REPO, capture_output=True, timeout=300,
                       check=True)  # fmt: skip
        driver = subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)  # fmt: skip
        # The driver records the execution as it starts (result.json, interrupted), and the
        # execution then runs again like any interrupted one: its new job clears that record
        # within a second, so the ledger's event is what is asserted.
        killed = killed_event(ring, job, 180)
        assert killed, said()
        assert killed[0]["status"] == "interrupted" and killed[0]["state"] == "CANCELLED"
        assert f"SLURM ended job {job} with CANCELLED" in killed[0]["reason"], killed
        assert "while no driver ran" in said()
        again = wait_for(lambda: [j for j in listed(ring, "slow") if j["job"] != job
                                  and j["view"] == slow[0]["view"]], 120)  # fmt: skip
        assert again, said()
        events = events_of(ring)
        # The new driver cancelled, by id, the jobs the dead one left, before its own: their
        # executions run again rather than twice at once.
        cancelled = [e for e in events if e["kind"] == "slurm_jobs_cancelled"]
        assert [e["reason"] for e in cancelled] == ["left by an earlier driver"], cancelled
        assert job not in cancelled[0]["jobs"] and set(cancelled[0]["jobs"]) <= set(left)
        # A job left that ended on its own before the new driver started (a fast execution's
        # job, which starts in under a second) is not cancelled; every other one was.
        states = {j["id"]: j["state"] for j in sacct_jobs(f"ringflow-{ring_id}_")}
        ended_alone = set(left) - set(cancelled[0]["jobs"])
        assert all(states.get(j) == "COMPLETED" for j in ended_alone), (ended_alone, states)
        assert not set(left) & {q.split("|")[0] for q in queued(f"ringflow-{ring_id}_")}
        assert "an earlier driver of the ring left" in said()
    finally:
        stop_driver(driver, log, ring_id)


# ---- a GPU partition (docs/slurm.md#gpu-partitions)


def test_a_gpu_ring_takes_its_gpus_from_slurms_allocations(tmp_path, monkeypatch):
    # The node's GPUs are gres (`make test-slurm` offers two stand-in devices where the
    # machine has none) and NVML is tests/fake_nvml's, on the driver and in every job.
    from test_gpu_profile_e2e import FAKE_DIR, GPU_PROGRAM, assert_each_run_held_its_own_gpu

    if "gpu:" not in subprocess.run(["sinfo", "-h", "-o", "%G"], capture_output=True,
                                    text=True, timeout=60).stdout:  # fmt: skip
        pytest.fail("the node offers no GPU: start SLURM with RINGFLOW_SLURM_FAKE_GPUS=2")
    monkeypatch.setenv("PYTHONPATH", f"{FAKE_DIR}:{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.setenv("RINGFLOW_FAKE_GPUS", "2")
    ring_id = f"sq-gpu-{os.getpid()}"
    make_task(tmp_path, views=("proxy", "final"))
    for name in ("a", "b"):
        (tmp_path / "cands" / name).mkdir(parents=True)
        (tmp_path / "cands" / name / "run.py").write_text(GPU_PROGRAM)
    guard = {"enabled": False, "seeds": 2, "alpha": 0.05, "margin": 0.0}
    config = write_config(tmp_path, ring_id=ring_id, task=str(tmp_path / "task"),
                          candidates=str(tmp_path / "cands"), baseline=None,
                          promote_top_k=1, gpus_per_execution=1, guard=guard)  # fmt: skip
    ring = tmp_path / "runs" / ring_id
    # The profile declares the GPUs the ring may hold at once, as docs/slurm.md says.
    done, seconds = slurm_ring(tmp_path, ring_id, configfile=config,
                               options=("--resources", "gpu=2"))  # fmt: skip
    print(f"GPU ring on SLURM: {seconds:.0f} s")
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-6000:])
    assert (ring / "final" / "FINAL.json").is_file()
    # The lock's probe job read the GPU model and driver on the node.
    assert json.loads((ring / "RING.json").read_text())["gpu"]["gpus"] == ["Fake GPU"]
    # Each program saw the GPU of its job's allocation, and only that one.
    executions = assert_each_run_held_its_own_gpu(ring)
    ids = {result["slurm_job_id"] for result in executions.values()}
    jobs = jobs_with_ids(f"ringflow-{ring_id}_", ids)
    for result in executions.values():
        assert jobs[result["slurm_job_id"]]["gpus"] == 1, jobs.get(result["slurm_job_id"])
    assert json.loads((ring / "slots.json").read_text())["cluster_slots"] == 2
    # The probe job asked for a GPU too; nothing else ran on the node.
    assert sorted(j["gpus"] for j in jobs.values()) == [1] * len(jobs)


def test_an_engineer_session_slurm_ends_for_time_settles_its_node_and_the_ring_goes_on(tmp_path):
    from engtools import engineer_config, search_config

    ring_id = f"sq-eng-{os.getpid()}"
    ring = tmp_path / "runs" / ring_id
    make_task(tmp_path, views=("proxy", "final"))
    make_candidate(tmp_path / "cands" / "a", mean=0.6)
    make_candidate(tmp_path / "cands" / "b", mean=0.5)
    # One engineered node (max_nodes counts the two static ones), whose engineer thinks
    # far past SLURM's one-minute limit for its job, without writing a program.
    engineer = engineer_config(tmp_path / "tools", "echo thinking\nsleep 600\n", env_pass=[])
    guard = {"enabled": False, "seeds": 5, "alpha": 0.05, "margin": 0.0}
    search = search_config(max_nodes=3)
    config = write_config(tmp_path, ring_id=ring_id, task=str(tmp_path / "task"),
                          candidates=str(tmp_path / "cands"), baseline=None, promote_top_k=1,
                          guard=guard, engineer=engineer, search=search)  # fmt: skip
    done, seconds = slurm_ring(tmp_path, ring_id, configfile=config,
                               options=("--set-resources", "engineer:runtime=1"))  # fmt: skip
    print(f"ring with a session SLURM ended for time: {seconds:.0f} s")
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-6000:])
    assert (ring / "final" / "FINAL.json").is_file()
    (session_file,) = ring.glob("nodes/*/session.json")
    session = json.loads(session_file.read_text())
    assert session["status"] == "interrupted" and session["slurm_state"] == "TIMEOUT", session
    assert "the engineer rule's runtime" in session["reason"] and session["slurm_job_id"]
    node = json.loads((session_file.parent / "node.json").read_text())
    assert node["status"] == "rejected" and node["error"].startswith("SLURM ended job")
    assert "thinking" in (session_file.parent / "trajectory" / "stdout.log").read_text()
    events = [json.loads(x) for x in (ring / "events.jsonl").read_text().splitlines()]
    killed = [e for e in events if e["kind"] == "slurm_job_killed"]
    assert [(e["rule"], e["job"]) for e in killed] == [("engineer", session["slurm_job_id"])]
    assert "its node is rejected, the ring goes on" in done.stdout + done.stderr
    assert not list((tmp_path / "runs" / ".boxes").glob("*"))
