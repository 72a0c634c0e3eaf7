"""Final reserve: the measured estimate, the reserve, the cutoff that only moves earlier."""

from __future__ import annotations

import itertools
import json
import multiprocessing
import threading

import pytest

from ringflow.errors import InputError
from ringflow.reserve import (
    CutoffFile,
    FinalistWork,
    FinalWorkload,
    default_seed_seconds,
    estimate_breakdown,
    estimate_final_seconds,
    next_cutoff,
    reserve_minutes,
    settle_deadline,
)


def workload(**overrides) -> FinalWorkload:
    base = {
        "finalists": (
            FinalistWork("n1", view_checks_pending=1, reviews_pending=1, promotion_seeds_missing=2),
            FinalistWork("n2", promotion_seeds_missing=1),
        ),
        "search_views": 2,
        "guard_seeds": 5,
        "scoring_queue_s": 3.0,
    }
    return FinalWorkload(**{**base, **overrides})


MEASURED = {"nodes": {"n1": 100.0, "n2": 40.0}, "baseline": 60.0, "fallback_s": 600.0}


def test_estimate_terms_are_priced_as_documented():
    terms = estimate_breakdown(workload(), MEASURED)
    # per view: n1 50 s, n2 20 s, baseline 30 s
    assert terms["view_checks"] == pytest.approx(1 * 50)
    assert terms["reviews"] == pytest.approx(1 * 50 * 1.5)
    assert terms["promotion"] == pytest.approx(2 * 100 + 1 * 40)
    assert terms["guard"] == pytest.approx(5 * 100 + 5 * 40 + 5 * 60)
    assert terms["cold_start"] == pytest.approx(50 * 1.5)  # the slowest finalist
    assert terms["baseline_final"] == pytest.approx(30)
    executions = 1 + 1 + (2 + 5) * 2 + (1 + 5) * 2 + 5 * 2 + 1 + 1
    assert terms["scoring_queue"] == pytest.approx(executions * 3.0)
    assert estimate_final_seconds(workload(), MEASURED) == pytest.approx(sum(terms.values()))


def test_estimate_grows_when_executions_are_measured_slower():
    fast = estimate_final_seconds(workload(), MEASURED)
    slower_node = {**MEASURED, "nodes": {"n1": 100.0, "n2": 90.0}}
    slower_baseline = {**MEASURED, "baseline": 200.0}
    assert estimate_final_seconds(workload(), slower_node) > fast
    assert estimate_final_seconds(workload(), slower_baseline) > fast
    assert estimate_final_seconds(workload(scoring_queue_s=10.0), MEASURED) > fast


def test_work_already_done_costs_nothing():
    done = FinalWorkload(
        finalists=(FinalistWork("n1", guard_seeds_pending=0),),
        search_views=2,
        guard_seeds=5,
        scoring_queue_s=3.0,
        baseline_guard_seeds_pending=0,
        baseline_final_pending=False,
        cold_start_pending=False,
    )
    assert estimate_final_seconds(done, MEASURED) == 0.0
    no_guard_no_baseline = workload(guard_seeds=0, has_baseline=False)
    terms = estimate_breakdown(no_guard_no_baseline, MEASURED)
    assert terms["guard"] == 0.0 and terms["baseline_final"] == 0.0


def test_unmeasured_nodes_use_the_median_then_the_fallback():
    measured = {"nodes": {"n1": 100.0, "x": 10.0}, "baseline": 40.0, "fallback_s": 999.0}
    assert default_seed_seconds(measured) == 40.0
    terms = estimate_breakdown(workload(), measured)
    assert terms["promotion"] == pytest.approx(2 * 100 + 1 * 40)  # n2 priced at the median
    nothing = {"nodes": {}, "baseline": None, "fallback_s": 300.0}
    assert default_seed_seconds(nothing) == 300.0
    assert default_seed_seconds({**nothing, "default_s": 12.0}) == 12.0
    with pytest.raises(InputError, match="no fallback_s"):
        estimate_final_seconds(workload(), {"nodes": {}})


def test_workload_rejects_bad_counts():
    with pytest.raises(ValueError, match="promotion_seeds_missing is at most 2"):
        FinalistWork("n", promotion_seeds_missing=3)
    with pytest.raises(ValueError, match="view_checks_pending"):
        FinalistWork("n", view_checks_pending=-1)
    with pytest.raises(ValueError, match="search_views"):
        workload(search_views=0)


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
