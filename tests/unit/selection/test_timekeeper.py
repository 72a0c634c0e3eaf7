"""Pricing what final selection still has to run, from the executions a ring recorded."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest

from ringflow.core.clock import FINAL_STAGES, final_top_k, load_ring, stage_deadline
from ringflow.core.reserve import ASSUMED, MEASURED, CutoffFile, priced_for_what_ran
from ringflow.core.state import LockedView
from ringflow.nodes import import_static
from ringflow.ring.lock import lock_ring
from ringflow.selection.timekeeper import (
    Measurements,
    Planner,
    estimate_ring,
    settle_final_k,
    slots_for,
    stage_timing,
    start_in_background,
    tick,
    tick_safely,
)
from ringtools import full_config, make_candidate, make_task

START = 1_000.0

# Moments are epoch seconds (about 1.8e9): pytest.approx's default relative tolerance
# would let them be half an hour apart.
EPOCH_ABS = 1e-3


def make_ring(tmp_path: Path, cands: dict[str, bool], *, big_final: int = 1, **overrides) -> Path:
    """A locked ring with imported nodes: candidates (name -> trains weights) and a baseline."""
    for name, weights in cands.items():
        make_candidate(tmp_path / "cands" / name, mean=0.5, weights=weights)
    base = make_candidate(tmp_path / "base" / "baseline", mean=0.4)
    task = make_task(tmp_path)
    final_data = task / "views" / "final" / "inputs" / "data.txt"
    final_data.write_text(final_data.read_text() * big_final)
    config = full_config(ring_id="t", task=str(task), candidates=str(tmp_path / "cands"),
                         baseline=str(base), **overrides)  # fmt: skip
    ring = lock_ring(config, tmp_path)
    import_static(ring)
    return Path(ring.ring_dir)


def record(
    ring: Path,
    node: str,
    view: str,
    variant: str,
    seconds: float,
    mode: str = "none",
    *,
    score: float = 0.5,
    scoring_s: float = 0.5,
    start: float = START,
) -> None:
    folder = ring / "nodes" / node / "exec" / view / variant
    folder.mkdir(parents=True, exist_ok=True)
    result = {"node": node, "view": view, "variant": variant, "status": "ok",
              "budget_cut": False, "weights_mode": mode, "wall_s": seconds,
              "started_at": start, "ended_at": start + seconds}  # fmt: skip
    (folder / "result.json").write_text(json.dumps(result))
    scored = {"scored": True, "valid": True, "score": score, "scoring_s": scoring_s}
    (folder / "score.json").write_text(json.dumps(scored))


def test_trainings_are_priced_from_trainings_and_replays_from_replays(tmp_path):
    ring = make_ring(tmp_path, {"a": True}, big_final=4)
    for view in ("proxy", "x3"):
        record(ring, "n001-a", view, "s0", 10.0, "train")
    record(ring, "n001-a", "proxy", "s1", 1.0, "replay")
    planner = Planner(load_ring(ring), _layout(ring))
    assert planner.mode("n001-a", "proxy", "g3") == "replay"  # its key was trained by s0
    assert planner.mode("n001-a", "final", "s0") == "train"
    guard = planner.job("n001-a", "proxy", "g3")
    assert guard.program.seconds == pytest.approx(1.0) and guard.program.basis == MEASURED
    assert guard.scoring.seconds == pytest.approx(0.5) and guard.scoring.basis == MEASURED
    other_view = planner.job("n001-a", "x3", "g3").program  # scaled by the inputs' size
    sizes = {view: load_ring(ring).views[view].input_bytes for view in ("proxy", "x3")}
    assert other_view.seconds == pytest.approx(1.0 * sizes["x3"] / sizes["proxy"])
    assert other_view.basis == ASSUMED
    # The cold start on the final view is a training, on four times the inputs, x 1.5.
    cold = planner.job("n001-a", "final", "s0", cold_start=True).program
    final = load_ring(ring).views["final"].input_bytes
    assert final == 4 * len("data of final\n")
    scaled = [10.0 * final / sizes[view] for view in ("proxy", "x3")]
    assert cold.seconds == pytest.approx(sum(scaled) / 2 * 1.5)
    assert cold.basis == ASSUMED and "scaled by input size" in cold.how and "cold start" in cold.how


def test_a_node_that_only_replayed_is_priced_by_the_rings_training_replay_ratio(tmp_path):
    ring = make_ring(tmp_path, {"a": True, "b": True})
    record(ring, "n001-a", "proxy", "s0", 12.0, "train")
    record(ring, "n001-a", "proxy", "s1", 2.0, "replay")
    record(ring, "n002-b", "proxy", "s0", 3.0, "replay")  # say its weights were in the store
    measured = Measurements(load_ring(ring), _layout(ring))
    assert measured.train_replay_ratio == pytest.approx(6.0)
    price = measured.program("n002-b", "proxy", "train")
    assert price.seconds == pytest.approx(3.0 * 6.0)
    assert price.basis == ASSUMED and "training/replay ratio" in price.how
    # Nobody did both: an assumed ratio, said so.
    alone = make_ring(tmp_path / "alone", {"b": True})
    record(alone, "n001-b", "proxy", "s0", 3.0, "replay")
    lonely = Measurements(load_ring(alone), _layout(alone)).program("n001-b", "proxy", "train")
    assert lonely.seconds == pytest.approx(15.0) and "assumed training/replay ratio" in lonely.how
    # ... and a replay derived from trainings, with no ratio measured, costs a training.
    trainer = make_ring(tmp_path / "trainer", {"c": True})
    record(trainer, "n001-c", "proxy", "s0", 8.0, "train")
    replay = Measurements(load_ring(trainer), _layout(trainer)).program("n001-c", "proxy", "replay")
    assert replay.seconds == pytest.approx(8.0) and replay.basis == ASSUMED


def test_nothing_measured_falls_back_and_says_so(tmp_path):
    ring = make_ring(tmp_path, {"a": False})
    measured = Measurements(load_ring(ring), _layout(ring))
    price = measured.program("n001-a", "proxy", "none")
    assert price.basis == ASSUMED and "nothing measured" in price.how
    assert measured.scoring_price("proxy").basis == ASSUMED
    record(ring, "n000-baseline", "proxy", "s0", 4.0)
    measured = Measurements(load_ring(ring), _layout(ring))
    assert measured.program("n001-a", "proxy", "none").seconds == pytest.approx(4.0)


def test_guard_views_train_once_then_replay_priced_by_size(tmp_path):
    ring = make_ring(tmp_path, {"a": True})
    lock = load_ring(ring)
    record(ring, "n001-a", "proxy", "s0", 10.0, "train")
    record(ring, "n001-a", "proxy", "s1", 1.0, "replay")
    # A ring with a guard view "holdout" three times the proxy's inputs.
    size = lock.views["proxy"].input_bytes
    limits = lock.config.limits.to_mapping()
    holdout = LockedView(name="holdout", input_bytes=3 * size, limits=limits)
    lock = dataclasses.replace(
        lock, views={**lock.views, "holdout": holdout}, guard_views=("holdout",)
    )
    planner = Planner(lock, _layout(ring))
    first, later = (f"g{s}" for s in lock.guard_seeds[:2])
    trains = planner.job("n001-a", "holdout", first).program
    assert trains.seconds == pytest.approx(30.0) and trains.basis == ASSUMED
    assert "scaled by input size" in trains.how
    assert planner.job("n001-a", "holdout", later).program.seconds == pytest.approx(3.0)
    guard = [b for b in planner.batches(["n001-a"]) if b.stage == "guard"]
    assert {job.name.split()[1].split("/")[0] for job in guard[0].jobs} == {"holdout"}


@pytest.mark.parametrize("mode, batched, calls", [("resample", False, 1 + 200),
                                                  ("resample", True, 2), ("rows", False, 1),
                                                  ("fixed", False, 1)])  # fmt: skip
def test_a_guard_runs_scoring_is_priced_with_its_bootstrap_calls(tmp_path, mode, batched, calls):
    ring = make_ring(tmp_path, {"a": False}, guard={"bootstrap": 200})
    record(ring, "n001-a", "proxy", "s0", 1.0, scoring_s=0.3)  # a search run: one call
    lock = load_ring(ring)
    task = dataclasses.replace(lock.task, scorer_mode=mode, scorer_bootstrap=batched)
    lock = dataclasses.replace(lock, task=task)
    planner = Planner(lock, _layout(ring))
    first = f"g{lock.guard_seeds[0]}"
    # A search seed is one scorer call; a guard run and the final view's run add the
    # bootstrap where the scorer draws the rows itself: one call per resample, or one more.
    assert planner.job("n001-a", "proxy", "s1").scoring.seconds == pytest.approx(0.3)
    for view, variant in (("proxy", first), (lock.final_view, "s0")):
        scoring = planner.job("n001-a", view, variant).scoring
        assert scoring.seconds == pytest.approx(0.3 * calls), (view, variant)
        assert (f"x {calls} scorer calls" in scoring.how) == (calls > 1)
    # Once a bootstrap was scored, what it took prices the others.
    record(ring, "n001-a", "proxy", first, 1.0, scoring_s=20.0)
    score = ring / "nodes" / "n001-a" / "exec" / "proxy" / first / "score.json"
    score.write_text(json.dumps({**json.loads(score.read_text()), "scorer_calls": calls}))
    measured = Planner(lock, _layout(ring)).job("n001-a", "proxy", f"g{lock.guard_seeds[1]}")
    expected = 20.0 if calls > 1 else pytest.approx((0.3 + 20.0) / 2)
    assert measured.scoring.seconds == expected and measured.scoring.basis == MEASURED


def test_review_commands_are_priced_from_the_configured_default_then_measured(tmp_path):
    ring = make_ring(tmp_path, {"a": False}, review="true", reserve={"review_command_min": 2})
    measured = Measurements(load_ring(ring), _layout(ring))
    assert measured.review_command_price().seconds == 120.0
    assert measured.review_command_price().basis == ASSUMED
    command = {"check": "review_command", "passed": True, "wall_s": 7.0, "ended_at": START + 7}
    review = {"node": "n009-x", "passed": True, "checks": [{"check": "view_blind"}, command]}
    (ring / "selection").mkdir(exist_ok=True)
    (ring / "selection" / "review-n009-x.json").write_text(json.dumps(review))
    measured = Measurements(load_ring(ring), _layout(ring))
    assert measured.review_command_price().seconds == 7.0
    assert measured.review_command_price().basis == MEASURED


def test_side_by_side_work_uses_the_slots_the_scheduler_gives(tmp_path):
    assert slots_for(None, 1) == 1
    assert slots_for({"cores": 8, "jobs": None, "gpus": None}, 2) == 4
    assert slots_for({"cores": 2, "jobs": None, "gpus": None}, 8) == 1  # threads capped
    assert slots_for({"cores": None, "jobs": 50, "gpus": None}, 8) == 50  # a cluster
    assert slots_for({"cores": 16, "jobs": None, "gpus": 1}, 1) == 1  # one GPU slot
    # On SLURM the profile's jobs are capped by what the partition holds at once.
    assert slots_for({"cores": None, "jobs": 50, "gpus": None, "cluster_slots": 2}, 1) == 2
    assert slots_for({"cores": None, "jobs": 1, "gpus": None, "cluster_slots": 4}, 1) == 1
    ring = make_ring(tmp_path, {"a": False})
    for view in ("proxy", "x3"):
        for variant in ("s0", "s1", "s2"):
            record(ring, "n001-a", view, variant, 10.0)
        record(ring, "n000-baseline", view, "s0", 10.0)
    serial = estimate_ring(ring)["stages"]["guard"]
    (ring / "slots.json").write_text(json.dumps({"cores": 4, "jobs": None, "gpus": None}))
    parallel = estimate_ring(ring)["stages"]["guard"]
    jobs = 2 * 2 * len(load_ring(ring).guard_seeds)  # both sides, both views
    assert serial == pytest.approx(jobs * 10.5)
    assert parallel == pytest.approx(jobs * 10 / 4 + 10 * 3 / 4 + jobs * 0.5 / 4 + 0.5 * 3 / 4)


def _searched_ring(tmp_path: Path, **overrides) -> Path:
    """Three candidates through search and promotion seeds; the baseline through search."""
    ring = make_ring(tmp_path, {"a": False, "b": False, "c": False}, promote_top_k=3,
                     final_top_k=3, **overrides)  # fmt: skip
    for i, node in enumerate(("n001-a", "n002-b", "n003-c")):
        for view in ("proxy", "x3"):
            for variant in ("s0", "s1", "s2"):
                record(ring, node, view, variant, 2.0, score=0.9 - i / 10)
    for view in ("proxy", "x3"):
        record(ring, "n000-baseline", view, "s0", 1.0)
    (ring / "selection").mkdir(exist_ok=True)
    (ring / "selection" / "search.json").write_text(json.dumps({"ended_at": START + 10}))
    promoted = {"promoted": ["n001-a", "n002-b", "n003-c"]}
    (ring / "selection" / "promotion.json").write_text(json.dumps(promoted))
    return ring


def test_the_ring_lowers_final_top_k_before_its_first_guard_run_when_the_reserve_cannot_cover_it(
    tmp_path,
):
    # Half of a 3-minute ring is 1.5 min: not enough for three finalists' guards.
    ring = _searched_ring(
        tmp_path, timeline={"duration_min": 3, "final_reserve_min": 1.5, "reserve_pad_min": 0.25}
    )
    lock = load_ring(ring)
    order = ["n001-a", "n002-b", "n003-c"]
    k = settle_final_k(ring, order)
    assert 1 <= k < 3
    settled = json.loads((ring / "final_k.json").read_text())
    assert settled["configured"] == 3 and settled["alpha_prime"] == pytest.approx(0.05 / k)
    last = settled["table"][-1]
    assert last["k"] == k and (last["fits"] or k == 1)
    assert all(not row["fits"] for row in settled["table"] if row["k"] > k)
    assert settled["finalists"] == order[:k]
    assert final_top_k(lock) == k  # what selection reads (ranking, α' of each verdict)
    events = [json.loads(line) for line in (ring / "events.jsonl").read_text().splitlines()]
    assert any(e["kind"] == "final_top_k_lowered" and e["k"] == k for e in events)
    assert "final_top_k_lowered" in (ring / "ledger.jsonl").read_text()
    assert settle_final_k(ring, list(reversed(order))) == k  # settled once


def test_k_is_never_lowered_once_a_guard_run_exists_and_kept_when_it_fits(tmp_path):
    late = _searched_ring(
        tmp_path / "late",
        timeline={"duration_min": 3, "final_reserve_min": 1.5, "reserve_pad_min": 0.25},
    )
    seed = load_ring(late).guard_seeds[0]
    record(late, "n000-baseline", "proxy", f"g{seed}", 1.0)
    assert settle_final_k(late, ["n001-a", "n002-b", "n003-c"]) == 3
    roomy = _searched_ring(tmp_path / "roomy", timeline={"duration_min": 600})
    assert settle_final_k(roomy, ["n001-a", "n002-b", "n003-c"]) == 3


def test_a_tick_plans_stage_deadlines_backwards_and_jobs_follow_them(tmp_path):
    ring = _searched_ring(tmp_path, timeline={"duration_min": 30, "reserve_pad_min": 1})
    lock = load_ring(ring)
    out = tick(ring)
    stages = out["stages"]
    hard_end = lock.stop_at - lock.config.timeline.stop_margin_s
    assert stages["final"]["deadline"] == pytest.approx(hard_end, abs=EPOCH_ABS)
    assert stages["guard"]["deadline"] == pytest.approx(
        hard_end - stages["final"]["share_s"], abs=EPOCH_ABS
    )
    assert stages["review"]["deadline"] < stages["guard"]["deadline"] < hard_end
    assert stage_deadline(lock, "guard") == pytest.approx(
        stages["guard"]["deadline"], abs=EPOCH_ABS
    )
    persisted = CutoffFile(ring / "cutoff.json").read()
    assert persisted["stages"] == stages and persisted["breakdown"] == out["terms"]
    # What was reserved at the end of the search is recorded beside what each stage took.
    timing = json.loads((ring / "final_timing.json").read_text())
    assert timing["reserved"]["estimate_s"] == pytest.approx(out["estimate_s"])
    seed = lock.guard_seeds[0]
    record(ring, "n001-a", "proxy", f"g{seed}", 3.0, start=START + 20)
    record(ring, "n001-a", "x3", f"g{seed}", 4.0, start=START + 22)
    timed = stage_timing(lock, _layout(ring))
    guard = next(row for row in timed["stages"] if row["stage"] == "guard")
    assert guard["actual_s"] == pytest.approx(26.5 - 20)  # the union of the two intervals
    assert guard["reserved_s"] == pytest.approx(timing["reserved"]["stages"]["guard"])
    # What the snapshot's prices come to for the two runs that ran: the worst case reserved
    # every finalist's guard and the baseline's, so it is less than the stage's share.
    ran = {f"n001-a proxy/g{seed}", f"n001-a x3/g{seed}"}
    priced = priced_for_what_ran(timing["reserved"]["batches"], ran)["guard"]
    assert guard["priced_ran_s"] == pytest.approx(priced)
    assert 0 < guard["priced_ran_s"] < guard["reserved_s"]
    assert guard["unpriced_executions"] == 0
    promotion = next(row for row in timed["stages"] if row["stage"] == "promotion")
    # Its runs were there before the snapshot: nothing was left to reserve or price.
    assert promotion["priced_ran_s"] == 0
    assert promotion["unpriced_executions"] == promotion["executions"] > 0


def test_a_short_ring_plans_no_stage_deadline_before_its_cutoff(tmp_path):
    # A 6-minute ring with the default 10-minute pad: the pad is cut to what the reserve
    # leaves, else promotion and review would end before the search does.
    timeline = {"duration_min": 6, "final_reserve_min": 2, "reserve_pad_min": 10}
    ring = _searched_ring(tmp_path, timeline=timeline)
    lock = load_ring(ring)
    out = tick(ring)
    cutoff = CutoffFile(ring / "cutoff.json").cutoff()
    hard_end = lock.stop_at - lock.config.timeline.stop_margin_s
    deadlines = [out["stages"][stage]["deadline"] for stage in FINAL_STAGES]
    assert deadlines == sorted(deadlines) and deadlines[-1] == pytest.approx(
        hard_end, abs=EPOCH_ABS
    )
    assert out["stages"]["promotion"]["deadline"] - out["stages"]["promotion"]["share_s"] >= (
        cutoff - 1e-6
    )
    assert sum(out["stages"][s]["share_s"] for s in FINAL_STAGES) == pytest.approx(
        hard_end - cutoff
    )


def _layout(ring: Path):
    from ringflow.core.layout import RingLayout

    return RingLayout(ring)


def test_final_selection_executions_and_the_review_command_follow_their_stage_deadline(tmp_path):
    import time

    from ringflow.core.clock import deadline_for, scoring_deadline_for
    from ringflow.selection.final import _review_command

    waits = "python3 -c 'import time; time.sleep(30)'"  # given the node folder too
    ring = make_ring(tmp_path, {"a": False}, review=waits)
    lock = load_ring(ring)
    now = time.time()
    plan = {"promotion": now + 10, "review": now + 1, "guard": now + 20, "final": now + 30}
    CutoffFile(ring / "cutoff.json").note_estimate(
        reserve_min=1, estimate_s=1, stages={s: {"deadline": d} for s, d in plan.items()}
    )
    for view, variant, stage in (("proxy", "s1", "promotion"), ("x3", "blind-s0", "review"),
                                 ("proxy", "g3", "guard"), ("final", "s0", "final")):  # fmt: skip
        assert deadline_for(lock, view, variant)() == pytest.approx(plan[stage], abs=EPOCH_ABS)
        assert scoring_deadline_for(lock, view, variant)() == pytest.approx(
            plan[stage], abs=EPOCH_ABS
        )
    check = _review_command(lock, _layout(ring), "n001-a")
    assert time.time() - now < 5  # stopped at the review deadline, not after 30 s
    assert check["passed"] is False and check["budget_cut"] is True
    # A plan never extends a stage past stop_at - stop_margin_s.
    late = {"final": {"deadline": lock.stop_at + 600}}
    CutoffFile(ring / "cutoff.json").note_estimate(reserve_min=1, estimate_s=1, stages=late)
    hard_end = lock.stop_at - lock.config.timeline.stop_margin_s
    assert deadline_for(lock, "final", "s0")() == pytest.approx(hard_end, abs=EPOCH_ABS)


def test_without_the_guard_only_the_top_finalist_and_the_baseline_run_the_final_view(tmp_path):
    ring = _searched_ring(tmp_path, guard={"enabled": False})
    planner = Planner(load_ring(ring), _layout(ring))
    batches = planner.batches(["n001-a", "n002-b", "n003-c"])
    assert [b.stage for b in batches] == ["final"]  # no review, no guard
    assert sorted(job.name for job in batches[0].jobs) == ["n000-baseline final/s0",
                                                           "n001-a final/s0"]  # fmt: skip


def test_under_slurm_each_execution_is_priced_with_its_jobs_measured_overhead(
    tmp_path, monkeypatch
):
    from ringflow.cluster.jobs import JobTimes
    from ringflow.selection import timekeeper

    ring = make_ring(tmp_path, {"a": False})
    for n, variant in enumerate(("s0", "s1")):
        record(ring, "n001-a", "proxy", variant, 10.0)
        path = ring / "nodes" / "n001-a" / "exec" / "proxy" / variant / "result.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "slurm_job_id": f"4{n}"}))
    # Job 40 waited 2 s for its start and lived 16 s around its 10 s run; job 41 waited
    # 30 s behind the ring's own jobs (the slots price that) and lived 18 s.
    times = {"40": JobTimes(100.0, 102.0, 118.0), "41": JobTimes(100.0, 130.0, 148.0)}
    asked = []
    monkeypatch.setattr(timekeeper, "query_job_times", lambda ids: asked.append(ids) or times)
    measured = Measurements(load_ring(ring), _layout(ring))
    assert asked == [["40", "41"]]
    assert measured.job_overhead_s == 7.0 + 2.0  # median of 6 and 8 s around, least wait
    job = Planner(load_ring(ring), _layout(ring), measured).job("n001-a", "proxy", "s2")
    assert job.program.seconds == 10.0 + 9.0
    assert "+ 9.0 s per SLURM job" in job.program.how
    # A ring off SLURM asks nothing and adds nothing.
    plain = make_ring(tmp_path / "plain", {"a": False})
    record(plain, "n001-a", "proxy", "s0", 10.0)
    assert Measurements(load_ring(plain), _layout(plain)).job_overhead_s is None
    assert asked == [["40", "41"]]


def test_the_background_ticks_keep_to_the_ring_when_the_driver_changes_folder(
    tmp_path, monkeypatch
):
    ring = make_ring(tmp_path, {"a": False})
    record(ring, "n001-a", "proxy", "s0", 1.0)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(tmp_path)
    start_in_background("runs/t", every_s=0.05, watch_s=0.02)
    # Snakemake returns to the folder it was started from as the workflow ends.
    monkeypatch.chdir(elsewhere)
    cutoff = ring / "cutoff.json"
    before = json.loads(cutoff.read_text()).get("estimated_at")
    deadline = time.monotonic() + 20
    while json.loads(cutoff.read_text()).get("estimated_at") == before:
        assert time.monotonic() < deadline, "no tick reached the ring"
        time.sleep(0.05)
    # A tick of a ring that is not there records nothing, and makes no folder for it.
    tick_safely("runs/t")
    assert list(elsewhere.iterdir()) == []
