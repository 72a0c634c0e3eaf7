"""The guard's paired bootstrap (docs/operations.md#final-selection), and the whole selection
simulated over thousands of rings in which every candidate is truly as good as the baseline."""

from __future__ import annotations

import numpy as np
import pytest

from ringflow import guardstats
from ringflow.core.state import Ring
from ringflow.selection.final import choose, ends_selection
from ringflow.selection.promote import rank_key
from ringtools import full_config

ALPHA = 0.05


def tables(values_by_seed: dict[int, list[float]], view: str = "guard") -> dict:
    return {view: values_by_seed}


def test_a_clear_advantage_has_a_positive_bound():
    rng = np.random.default_rng(1)
    base = {s: list(0.80 + rng.normal(0, 0.01, 200)) for s in (3, 4, 5)}
    cand = {s: [v + 0.05 + rng.normal(0, 0.005) for v in base[s]] for s in (3, 4, 5)}
    stats = guardstats.paired_bootstrap_lcb(
        tables(cand), tables(base), alpha=ALPHA, direction="maximize", rng_seed=1
    )
    assert stats["lcb"] == pytest.approx(0.05, abs=0.01) and stats["reason"] is None
    assert stats["replicates"] == 200 and stats["quantile_index"] == 9
    replace, why = guardstats.guard_verdict(stats, margin=0.0, complete=True)
    assert replace and "LCB" in why


def test_direction_minimize_flips_the_sign():
    cand = {3: [1.0, 1.1, 0.9, 1.05] * 10}
    base = {3: [2.0, 2.2, 1.9, 2.1] * 10}
    low = guardstats.paired_bootstrap_lcb(
        tables(cand), tables(base), alpha=0.1, direction="minimize"
    )
    high = guardstats.paired_bootstrap_lcb(
        tables(cand), tables(base), alpha=0.1, direction="maximize"
    )
    assert low["lcb"] > 0.8 and high["lcb"] < -0.8


def test_no_spread_never_passes_and_says_why():
    # Deterministic programs and a scorer that ignores the seed: a constant 1e-9 advantage.
    cand = {s: [0.5 + 1e-9] * 200 for s in (3, 4, 5, 6, 7)}
    base = {s: [0.5] * 200 for s in (3, 4, 5, 6, 7)}
    stats = guardstats.paired_bootstrap_lcb(
        tables(cand), tables(base), alpha=ALPHA, direction="maximize"
    )
    assert stats["lcb"] is None and "no spread" in stats["reason"]
    replace, why = guardstats.guard_verdict(stats, margin=0.0, complete=True)
    assert not replace and "ignores --seed" in why


def test_a_finalist_that_scores_as_the_baseline_everywhere_is_told_apart_from_a_blind_scorer():
    # A finalist making the baseline's predictions (a copy): every paired difference is 0,
    # with a scorer that does resample; the seed-blind advice would mislead here.
    rows = {s: [0.5 + 0.01 * ((b * 7 + s) % 13) for b in range(200)] for s in (3, 4, 5, 6, 7)}
    stats = guardstats.paired_bootstrap_lcb(
        tables(rows), tables(rows), alpha=ALPHA, direction="maximize"
    )
    assert stats["lcb"] is None and "no spread" in stats["reason"]
    assert "scored the same on every guard run" in stats["reason"]
    assert "ignores --seed" not in stats["reason"]
    replace, why = guardstats.guard_verdict(stats, margin=0.0, complete=True, against="incumbent")
    assert not replace and why.endswith(": incumbent kept")


def test_rare_large_losses_are_not_read_as_certainty():
    # +0.1 on most seeds, -1.9 on a few (mean 0): resampling the seeds' runs keeps the
    # losses in the interval whenever a guard seed shows one.
    cand = {s: [0.1 if s != 5 else -1.9] * 50 for s in range(3, 23)}
    base = {s: [0.0] * 50 for s in range(3, 23)}
    stats = guardstats.paired_bootstrap_lcb(
        tables(cand), tables(base), alpha=ALPHA, direction="maximize", rng_seed=3
    )
    assert stats["lcb"] is not None and stats["lcb"] < 0


def test_bad_tables_are_clear_errors():
    with pytest.raises(ValueError, match="same guard views"):
        guardstats.paired_bootstrap_lcb(
            {"a": {3: [1.0]}}, {"b": {3: [1.0]}}, alpha=ALPHA, direction="maximize"
        )
    with pytest.raises(ValueError, match="bootstrap scores needed"):
        guardstats.paired_bootstrap_lcb(
            {"a": {3: [1.0, 2.0]}}, {"a": {3: [1.0]}}, alpha=ALPHA, direction="maximize"
        )
    with pytest.raises(ValueError, match="direction"):
        guardstats.paired_bootstrap_lcb(
            {"a": {3: [1.0]}}, {"a": {3: [1.0]}}, alpha=ALPHA, direction="up"
        )


# ---- the whole selection, simulated ------------------------------------------------------

CONFIG = full_config(guard={"enabled": True}, final_top_k=3)


def bootstrap_accuracy(correct: np.ndarray, resamples: np.ndarray) -> np.ndarray:
    """Accuracy of one program on each row resample (rows: resamples x n indices)."""
    return correct[resamples].mean(axis=1)


def simulate_ring(rng, *, p_candidates, p_baseline=0.9, search_rows=200, guard_rows=300,
                  views=2, promote_k=3, final_k=3, bootstrap=200, guard_seeds=5):  # fmt: skip
    """One ring with deterministic programs: each predicts each row right with its own
    probability, independently. Search and promotion score bootstrap resamples (seeds 0,
    1, 2) of the search views' rows; the guard scores resamples of fresh guard rows."""
    names = ["base", *(f"c{i:02d}" for i in range(len(p_candidates)))]
    probs = [p_baseline, *p_candidates]
    search = {n: rng.random((views, search_rows)) < p for n, p in zip(names, probs, strict=True)}
    guard = {n: rng.random(guard_rows) < p for n, p in zip(names, probs, strict=True)}
    seed_rows = rng.integers(0, search_rows, size=(3, views, search_rows))

    def seed_mean(node, seed):
        return float(np.mean([search[node][v][seed_rows[seed, v]].mean() for v in range(views)]))

    rows = [{"node": n, "score": seed_mean(n, 0)} for n in names[1:]]
    rows.sort(key=rank_key("maximize"))
    promoted = [r["node"] for r in rows[:promote_k]]
    ranked = [{"node": n, "score": np.mean([seed_mean(n, s) for s in range(3)])} for n in promoted]
    ranked.sort(key=rank_key("maximize"))
    ranking = {"finalists": [r["node"] for r in ranked[:final_k]], "ranked": ranked}
    resamples = rng.integers(0, guard_rows, size=(bootstrap, guard_rows))
    seeds = list(range(3, 3 + guard_seeds))
    base_scores = list(bootstrap_accuracy(guard["base"], resamples))
    a_prime = guardstats.alpha_prime(ALPHA, final_k)
    verdicts = []
    for node in ranking["finalists"]:
        cand_scores = list(bootstrap_accuracy(guard[node], resamples))
        stats = guardstats.paired_bootstrap_lcb(
            {"guard": dict.fromkeys(seeds, cand_scores)},
            {"guard": dict.fromkeys(seeds, base_scores)},
            alpha=a_prime,
            direction="maximize",
            rng_seed=node,
        )
        replace, why = guardstats.guard_verdict(stats, margin=0.0, complete=True)
        verdicts.append({"node": node, "eligible": True, "replace": replace, "reason": why,
                         "guard": {"complete": True}})  # fmt: skip
        if ends_selection(verdicts[-1]):
            break
    chosen, _, _ = choose(CONFIG_RING, {"baseline": "base"}, ranking, verdicts)
    return chosen


CONFIG_RING = Ring.from_record({"ring_id": "sim", "ring_dir": "/runs/sim", "config": CONFIG})


def test_null_population_replaces_the_baseline_at_most_alpha_of_the_time():
    rng = np.random.default_rng(20261201)
    rings = 2000
    replaced = sum(simulate_ring(rng, p_candidates=[0.9] * 10) != "base" for _ in range(rings))
    rate = replaced / rings
    # Monte Carlo error of a rate of alpha over this many rings: three standard errors.
    assert rate <= ALPHA + 3 * np.sqrt(ALPHA * (1 - ALPHA) / rings), rate


def test_a_truly_better_candidate_is_found_by_the_same_selection():
    rng = np.random.default_rng(7)
    rings = 200
    picks = [simulate_ring(rng, p_candidates=[0.9] * 9 + [0.97]) for _ in range(rings)]
    assert sum(p == "c09" for p in picks) / rings > 0.75
    assert (
        all(p in ("base", "c09") for p in picks)
        or sum(p not in ("base", "c09") for p in picks) <= 0.05 * rings
    )
