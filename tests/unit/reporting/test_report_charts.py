"""The report's charts: round ticks covering the data, time in a unit that keeps labels
short, and axis labels that say their unit."""

from __future__ import annotations

import pytest

from ringflow.reporting.charts import Chart, nice_ticks, tick_label, time_unit


@pytest.mark.parametrize(
    ("lo", "hi", "expected"),
    [
        (0.883, 0.987, [0.88, 0.9, 0.92, 0.94, 0.96, 0.98, 1.0]),
        (0.0, 80.0, [0, 20, 40, 60, 80]),
        (-3.2, 7.9, [-4, -2, 0, 2, 4, 6, 8]),
        (0.0, 12.3, [0, 5, 10, 15]),
    ],
)
def test_ticks_are_round_and_cover_the_data(lo, hi, expected):
    ticks = nice_ticks(lo, hi)
    assert ticks == pytest.approx(expected)
    assert ticks[0] <= lo and ticks[-1] >= hi


def test_time_unit_keeps_labels_short():
    assert time_unit(90) == ("s", 1.0)
    assert time_unit(45 * 60) == ("min", 60.0)
    assert time_unit(24 * 3600) == ("h", 3600.0)
    assert tick_label(0.5, 0.5) == "0.5" and tick_label(0.94, 0.02) == "0.94"
    assert tick_label(40.0, 20.0) == "40"


def test_chart_maps_data_inside_its_frame():
    chart = Chart(600, 250, t_max=5400, values=[0.5, 0.75], ylabel="score (higher is better)")
    frame = chart.frame()
    assert frame["xlabel"] == "wall time since the ring started (min)"
    assert [t["label"] for t in frame["xticks"]] == ["0", "20", "40", "60", "80", "100"]
    box = frame["box"]
    assert chart.x(0) == box["left"] and chart.x(5400) < box["right"]
    assert box["top"] <= chart.y(0.75) < chart.y(0.5) <= box["bottom"]
    # One value only: the axis still has a span around it.
    flat = Chart(600, 250, t_max=10, values=[0.9, 0.9])
    assert flat.y_lo < 0.9 < flat.y_hi
    steps = [{"t": 0, "score": 0.5}, {"t": 60, "score": 0.75}]
    assert chart.step_path(steps, until=120).count(",") == 4
