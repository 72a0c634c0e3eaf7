"""Charts of the report as inline SVG data: score against wall time, with round ticks.

The page draws them by hand (the `frame` macro of templates/_chart.html.j2) rather than
embedding a plotting library's output, so that every point keeps its own tooltip and the
page stays one small file. Ticks fall on round numbers (1, 2 or 5 times a power of ten; in
seconds, minutes or hours for time) and both axes say their unit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import pairwise

# Time units of the x axis: the first whose span keeps tick labels short.
TIME_UNITS = (("s", 1.0), ("min", 60.0), ("h", 3600.0))
# Round tick steps, in the axis's unit.
STEPS = (1, 2, 5)


def nice_step(span: float, ticks: int = 6) -> float:
    """A round step (1, 2 or 5 times a power of ten) giving at most about `ticks` intervals."""
    if span <= 0 or not math.isfinite(span):
        return 1.0
    raw = span / ticks
    power = 10 ** math.floor(math.log10(raw))
    for mult in (*STEPS, 10):
        if mult * power >= raw:
            return mult * power
    return 10 * power


def nice_ticks(lo: float, hi: float, ticks: int = 6) -> list[float]:
    """Round values covering [lo, hi]: the first at or below lo, the last at or above hi."""
    step = nice_step(hi - lo, ticks)
    first = math.floor(lo / step + 1e-9) * step
    values, v = [], first
    while v < hi + step * 0.999:
        values.append(round(v, 12))
        v += step
    return values


def time_unit(t_max: float) -> tuple[str, float]:
    """The unit of the time axis: seconds up to 3 minutes, minutes up to 3 hours, then hours."""
    if t_max <= 180:
        return TIME_UNITS[0]
    if t_max <= 3 * 3600:
        return TIME_UNITS[1]
    return TIME_UNITS[2]


def tick_label(value: float, step: float) -> str:
    """A tick value with as many decimals as its step needs (no trailing noise)."""
    decimals = max(0, -math.floor(math.log10(step) + 1e-9)) if step > 0 else 0
    return f"{value:.{decimals}f}"


@dataclass
class Chart:
    """A chart of score against time since a start, `width` x `height` pixels."""

    width: int
    height: int
    t_max: float
    values: list[float]
    xlabel: str = "wall time since the ring started"
    ylabel: str = "score"
    left: int = 64
    right_pad: int = 16
    top: int = 14
    bottom_pad: int = 44

    def __post_init__(self) -> None:
        self.right, self.bottom = self.width - self.right_pad, self.height - self.bottom_pad
        self.unit, self.scale = time_unit(self.t_max)
        span = max(self.t_max, 1.0) / self.scale
        self.xticks_values = nice_ticks(0.0, span)
        self.x_hi = self.xticks_values[-1] * self.scale
        lo, hi = (min(self.values), max(self.values)) if self.values else (0.0, 1.0)
        if hi - lo < 1e-12:
            pad = abs(hi) * 0.05 or 0.05
            lo, hi = lo - pad, hi + pad
        self.yticks_values = nice_ticks(lo, hi)
        self.y_lo, self.y_hi = self.yticks_values[0], self.yticks_values[-1]

    def x(self, t: float) -> float:
        frac = min(max(t, 0.0), self.x_hi) / self.x_hi
        return round(self.left + (self.right - self.left) * frac, 1)

    def y(self, v: float) -> float:
        frac = (v - self.y_lo) / (self.y_hi - self.y_lo)
        return round(self.bottom - (self.bottom - self.top) * frac, 1)

    def step_path(self, steps: list[dict], until: float | None = None) -> str:
        """The best-so-far line: flat until the next improvement, then up (or down); it
        runs on to `until` (the last time shown) or to the right edge."""
        if not steps:
            return ""
        coords = [(self.x(steps[0]["t"]), self.y(steps[0]["score"]))]
        for prev, row in pairwise(steps):
            coords += [(self.x(row["t"]), self.y(prev["score"])),
                       (self.x(row["t"]), self.y(row["score"]))]  # fmt: skip
        end = self.right if until is None else self.x(until)
        coords.append((max(end, coords[-1][0]), self.y(steps[-1]["score"])))
        return " ".join(f"{a},{b}" for a, b in coords)

    def frame(self) -> dict:
        """Axes, ticks and axis labels (with units) for the template's chart macro."""
        xstep = self.xticks_values[1] - self.xticks_values[0] if len(self.xticks_values) > 1 else 1
        ystep = self.yticks_values[1] - self.yticks_values[0] if len(self.yticks_values) > 1 else 1
        return {
            "width": self.width,
            "height": self.height,
            "box": {"left": self.left, "right": self.right, "top": self.top, "bottom": self.bottom},
            "xticks": [
                {"x": self.x(v * self.scale), "label": tick_label(v, xstep)}
                for v in self.xticks_values
            ],
            "yticks": [{"y": self.y(v), "label": tick_label(v, ystep)} for v in self.yticks_values],
            "xlabel": f"{self.xlabel} ({self.unit})",
            "ylabel": self.ylabel,
            "unit": self.unit,
        }

    def marker(self, t: float, label: str, cls: str = "mark") -> dict:
        """A vertical line at time t (first valid result, cutoff, a ring boundary)."""
        return {"x": self.x(t), "label": label, "cls": cls}
