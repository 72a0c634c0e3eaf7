"""Final reserve: the measured estimate, the reserve, the cutoff that only moves earlier."""

from __future__ import annotations

import itertools
import json
import multiprocessing
import threading

import pytest

from ringflow.core.errors import InputError
from ringflow.core.reserve import (
    ASSUMED,
    MEASURED,
    Batch,
    CutoffFile,
    Job,
    Price,
    batch_record,
    estimate,
    fit_final_k,
    next_cutoff,
    parallel_seconds,
    priced_for_what_ran,
    reserve_minutes,
    settle_deadline,
    stage_deadlines,
    stage_seconds,
    total_seconds,
)


def job(name: str, seconds: float, scoring: float = 1.0, basis: str = MEASURED) -> Job:
    return Job(name, Price(seconds, basis, "own runs on the view"),
               Price(scoring, MEASURED, "measured scoring on the view"))  # fmt: skip


def test_side_by_side_work_is_divided_by_the_slots():
    assert parallel_seconds([10, 10, 10, 10], 1) == 40  # one slot: the serial sum
    assert parallel_seconds([10, 10, 10, 10], 2) == pytest.approx(40 / 2 + 10 / 2)
    assert parallel_seconds([10, 10, 10, 10], 64) == pytest.approx(40 / 64 + 10 * 63 / 64)
    assert parallel_seconds([30, 1, 1], 8) >= 30  # never less than the longest job
    assert parallel_seconds([], 4) == 0.0
    with pytest.raises(ValueError, match="slots"):
        parallel_seconds([1], 0)
    with pytest.raises(ValueError, match="duration"):
        parallel_seconds([-1], 1)


@pytest.mark.parametrize("slots", [1, 2, 3, 5])
def test_the_bound_covers_every_greedy_schedule(slots):
    """Graham: whatever order the scheduler takes them in, jobs end within the bound."""
    import random

    rng = random.Random(slots)
    for _ in range(200):
        durations = [rng.uniform(0.1, 20) for _ in range(rng.randint(1, 12))]
        free = [0.0] * slots
        for d in rng.sample(durations, len(durations)):
            i = free.index(min(free))
            free[i] += d
        assert max(free) <= parallel_seconds(durations, slots) + 1e-9


def test_estimate_prices_each_stage_and_says_what_is_measured():
    batches = [
        Batch("promotion", [job("a x/s1", 10), job("a x/s2", 10)], slots=2),
        Batch("review", [job("a x/blind-s0", 40, basis=ASSUMED)], slots=2,
              after=Price(300, ASSUMED, "reserve.review_command_min")),
        Batch("guard", [job(f"a x/g{s}", 5) for s in range(3, 8)], slots=1),
        Batch("final", [job("a final/s0", 60, basis=ASSUMED), job("b final/s0", 20)], slots=2),
    ]  # fmt: skip
    terms = {(t.stage, t.term): t for t in estimate(batches)}
    assert terms["promotion", "programs"].seconds == pytest.approx(10 + 5)
    assert terms["promotion", "programs"].basis == MEASURED
    assert terms["promotion", "scoring queue"].seconds == pytest.approx(1 + 0.5)
    assert terms["review", "programs"].basis == ASSUMED
    assert terms["review", "review command"].seconds == 300
    assert terms["review", "review command"].how == ["reserve.review_command_min"]
    assert terms["guard", "programs"].seconds == pytest.approx(25)  # one slot: serial
    assert terms["guard", "scoring queue"].seconds == pytest.approx(5)
    final = terms["final", "programs"]
    assert final.seconds == pytest.approx(80 / 2 + 60 / 2)
    assert (final.measured, final.assumed, final.basis) == (1, 1, ASSUMED)
    stages = stage_seconds(estimate(batches))
    assert stages["review"] == pytest.approx(40 + 1 + 300)
    assert stages["search"] == 0.0
    assert total_seconds(estimate(batches)) == pytest.approx(sum(stages.values()))


def test_the_snapshot_prices_the_runs_that_ran_as_the_estimate_would():
    review = Batch("review", [job("a x/blind-s0", 40), job("a x/blind2-s0", 30)], slots=2,
                   after=Price(300, ASSUMED, "reserve.review_command_min"))  # fmt: skip
    first = Batch("guard", [job(f"a x/g{s}", 5) for s in range(3, 6)], slots=1)
    second = Batch("guard", [job(f"b x/g{s}", 7) for s in range(3, 6)], slots=1)
    batches = [batch_record(b) for b in (review, first, second)]
    batches = json.loads(json.dumps(batches))  # as final_timing.json keeps it
    # Everything ran: the estimate itself.
    every = {name for b in batches for name in b["jobs"]}
    assert priced_for_what_ran(batches, every) == pytest.approx(
        stage_seconds(estimate([review, first, second]))
    )
    # Only the first finalist was guarded (it passed): the second's batch counts nothing.
    ran = {"a x/g3", "a x/g4", "a x/g5", "a x/blind-s0"}
    priced = priced_for_what_ran(batches, ran)
    assert priced["guard"] == pytest.approx(3 * (5 + 1))
    assert priced["review"] == pytest.approx(40 + 1 + 300)  # its batch ran: the command too
    assert priced["promotion"] == 0.0
    assert priced_for_what_ran(batches, set())["review"] == 0.0


def test_batches_add_up_in_order_and_reject_bad_input():
    one = Batch("guard", [job("a", 10)])
    two = Batch("guard", [job("b", 20)])
    assert stage_seconds(estimate([one, two]))["guard"] == pytest.approx(10 + 1 + 20 + 1)
    with pytest.raises(ValueError, match="stage"):
        Batch("settle", [])
    with pytest.raises(ValueError, match="slots"):
        Batch("guard", [], slots=0)
    with pytest.raises(ValueError, match="basis"):
        Price(1, "guessed", "x")
    with pytest.raises(ValueError, match="non-negative"):
        Price(-1, MEASURED, "x")


def test_stage_deadlines_are_computed_backwards_from_stop_at():
    plan = stage_deadlines(10_000, 60, {"promotion": 100, "review": 50, "guard": 400,
                                        "final": 200, "search": 999})  # fmt: skip
    assert plan["final"] == {"estimate_s": 200, "share_s": 200, "deadline": 9940}
    assert plan["guard"]["deadline"] == 9940 - 200
    assert plan["review"]["deadline"] == 9940 - 200 - 400
    assert plan["promotion"]["deadline"] == 9940 - 200 - 400 - 50
    assert list(plan) == ["promotion", "review", "guard", "final"]
    # a stage with nothing left gives the stage before it all of its time
    assert stage_deadlines(10_000, 60, {"final": 0.0})["guard"]["deadline"] == 9940


def test_the_pad_is_shared_in_proportion_to_each_stage_estimate():
    plan = stage_deadlines(10_000, 60, {"review": 100, "guard": 200, "final": 100}, pad_s=400)
    assert plan["final"]["share_s"] == pytest.approx(200)  # 100 + 400 * 100 / 400
    assert plan["guard"]["share_s"] == pytest.approx(400)
    assert plan["guard"]["deadline"] == pytest.approx(9940 - 200)
    assert plan["review"]["deadline"] == pytest.approx(9940 - 200 - 400)
    assert sum(p["share_s"] for p in plan.values()) == pytest.approx(400 + 400)
    nothing_left = stage_deadlines(10_000, 60, {}, pad_s=400)
    assert all(p["deadline"] == 9940 for p in nothing_left.values())


def test_final_k_is_the_largest_that_the_capped_reserve_covers():
    per_finalist = 600.0  # seconds of review and guard per finalist
    price = lambda k: 300 + k * per_finalist  # noqa: E731
    assert fit_final_k(price, 3, pad_min=10, cap_min=60)[0] == 3  # 35 + 10 <= 60
    k, table = fit_final_k(price, 3, pad_min=10, cap_min=35)
    assert k == 2 and [row["k"] for row in table] == [3, 2]
    assert table[0] == {"k": 3, "estimate_s": 2100.0, "fits": False}
    assert fit_final_k(price, 3, pad_min=10, cap_min=5)[0] == 1  # never below one
    with pytest.raises(ValueError, match="final_top_k"):
        fit_final_k(price, 0, 10, 60)


def test_reserve_minutes_max_of_configured_and_estimate_capped_at_half_wall():
    assert reserve_minutes(20, 300, 10, 120) == 20  # 5 + 10 < 20
    assert reserve_minutes(20, 1800, 10, 120) == 40  # 30 + 10
    assert reserve_minutes(20, 6000, 10, 120) == 60  # capped at half of 120
    assert reserve_minutes(0.5, 6, 0.1, 2) == pytest.approx(0.5)  # fractional demo values
    with pytest.raises(ValueError, match="estimate"):
        reserve_minutes(20, -1, 10, 120)


def test_cutoff_moves_earlier_never_later_never_past_half_wall():
    start, stop_at = 1_000_000.0, 1_000_000.0 + 3600  # a 60 min ring
    cutoff = stop_at - 20 * 60
    grown = next_cutoff(cutoff, stop_at, start, 25)
    assert grown == stop_at - 25 * 60 < cutoff
    # a smaller reserve later never moves it back
    assert next_cutoff(grown, stop_at, start, 15) == grown
    # a huge reserve cannot pass the middle of the ring (nor, therefore, the start)
    assert next_cutoff(grown, stop_at, start, 500) == start + 1800
    # a cutoff already before the midpoint (configured so) stays where it is
    assert next_cutoff(start + 600, stop_at, start, 500) == start + 600
    with pytest.raises(ValueError, match="after start"):
        next_cutoff(cutoff, start, start, 10)


def test_whole_reserve_pipeline_respects_the_half_wall_cap():
    start, wall_min = 0.0, 90.0
    stop_at = start + wall_min * 60
    cutoff = stop_at - 20 * 60
    estimates = [600, 1200, 900, 4000, 100_000, 50]
    seen = [cutoff]
    for estimate_s in estimates:
        reserve = reserve_minutes(20, estimate_s, 10, wall_min)
        cutoff = next_cutoff(cutoff, stop_at, start, reserve)
        seen.append(cutoff)
    assert all(b <= a for a, b in itertools.pairwise(seen))
    assert min(seen) == start + wall_min * 60 / 2


def test_settle_deadline_bounds():
    cutoff, stop_at = 1000.0, 2000.0
    assert settle_deadline(cutoff, 30, 60, stop_at, 60) == 1090.0
    assert settle_deadline(cutoff, 600, 600, stop_at, 60) == 1940.0  # stop_at - margin
    # never before the cutoff, even when the stop margin would say so
    assert settle_deadline(1980.0, 30, 60, stop_at, 60) == 1980.0
    assert settle_deadline(cutoff, 0, 0, stop_at, 60) == cutoff


def test_cutoff_file_persists_and_refuses_moving_later(tmp_path):
    path = tmp_path / "ring" / "CUTOFF.json"
    live = CutoffFile(path)
    state = live.ensure(5000.0, reserve_min=20)
    assert state["cutoff"] == 5000.0 and len(state["history"]) == 1

    assert live.move_earlier(4700.0, reserve_min=25, estimate_s=900.0, reason="estimate grew")
    assert not live.move_earlier(4800.0, reserve_min=15)
    assert not live.move_earlier(4700.0)

    reopened = CutoffFile(path)
    # a restarted ring keeps the moved cutoff instead of its configured one
    assert reopened.ensure(5000.0, reserve_min=20)["cutoff"] == 4700.0
    state = reopened.read()
    assert state["cutoff"] == 4700.0
    assert state["reserve_min"] == 25 and state["estimate_s"] == 900.0
    assert state["history"][-1] == {
        "cutoff": 4700.0,
        "previous": 5000.0,
        "at": state["updated_at"],
        "reserve_min": 25,
        "estimate_s": 900.0,
        "reason": "estimate grew",
    }
    on_disk = json.loads(path.read_text())
    assert on_disk == state
    # the first instance sees the other's write (the file was replaced)
    assert reopened.move_earlier(4600.0)
    assert live.cutoff() == 4600.0
    # mutating a returned state does not leak into later reads
    state["cutoff"] = 1.0
    assert reopened.read()["cutoff"] == 4600.0


def test_cutoff_file_errors(tmp_path):
    missing = CutoffFile(tmp_path / "nope.json")
    with pytest.raises(InputError, match=r"cutoff file .*not found"):
        missing.read()
    with pytest.raises(InputError, match="not found"):
        missing.move_earlier(1.0)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"cutoff": "soon"}))
    with pytest.raises(InputError, match="'cutoff' must be a number"):
        CutoffFile(bad).read()
    with pytest.raises(ValueError, match="finite"):
        CutoffFile(bad).move_earlier(float("nan"))


def _hammer(path: str, start: float, count: int) -> None:
    live = CutoffFile(path)
    for i in range(count):
        live.move_earlier(start - i, writer=start)


def test_concurrent_writers_and_reader_see_only_whole_files_and_monotone_cutoffs(tmp_path):
    path = tmp_path / "CUTOFF.json"
    CutoffFile(path).ensure(10_000.0, reserve_min=20)
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=_hammer, args=(str(path), 9_990.0 - k, 40)) for k in range(2)]
    observed: list[float] = []
    stop = threading.Event()

    def reader() -> None:
        live = CutoffFile(path)
        while not stop.is_set():
            observed.append(live.cutoff())  # a half-written file would raise here

    thread = threading.Thread(target=reader)
    thread.start()
    for w in writers:
        w.start()
    for w in writers:
        w.join(timeout=60)
        assert w.exitcode == 0
    stop.set()
    thread.join()
    assert len(set(observed)) > 1 and all(b <= a for a, b in itertools.pairwise(observed))
    final = CutoffFile(path).read()
    history = [entry["cutoff"] for entry in final["history"]]
    assert history == sorted(history, reverse=True)  # every accepted move was earlier
    assert final["cutoff"] == min(9_990.0 - 39, 9_989.0 - 39)
