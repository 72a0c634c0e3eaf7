"""The view-blind check's rates, simulated through its own functions (screen, confirm):
an honest program whose output varies with normal noise fails at most 0.5% of the time;
one whose real-view score is shifted by 10 of its own SDs is caught at least 85%."""

from __future__ import annotations

import random

import pytest

from ringflow.selection.viewblind import confirm, screen

EXTRA = 8  # view_blind.extra_runs, the default


@pytest.mark.parametrize("retrains", [True, False])
def test_honest_programs_with_normal_noise_rarely_fail(retrains):
    """Measured over 20,000 finalists: 0.15% (a program that retrains), 0.46% (one without
    weights whose output varies: the screen flags it every time)."""
    rng = random.Random(f"honest/{retrains}")
    rings = 20_000
    failed = sum(simulate(rng, 0.0, retrains) for _ in range(rings))
    assert failed / rings <= 0.005


@pytest.mark.parametrize("retrains", [True, False])
def test_a_ten_sd_view_dependent_shift_is_caught(retrains):
    """Measured over 5,000 finalists: 88.1% (a program that retrains: the screen allows
    it four times its retraining noise), 100% (one without weights)."""
    rng = random.Random(f"shifted/{retrains}")
    rings = 5_000
    caught = sum(simulate(rng, 10.0, retrains) for _ in range(rings))
    assert caught / rings >= 0.85


def simulate(rng: random.Random, shift: float, retrains: bool) -> bool:
    """Whether the check fails the finalist (first screen, then further disguised runs)."""

    def run(offset: float = 0.0) -> float:
        return 0.8 + 0.01 * (offset + rng.gauss(0, 1))

    d1, d2 = run(), run()
    first = screen(run(shift), d1, d2, retrains)
    if not first["flagged"]:
        return False
    if not first["varies"]:
        return True
    return confirm(run(shift), [d1, d2, *(run() for _ in range(EXTRA))])["outside"]
