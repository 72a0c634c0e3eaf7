"""A chain never deploys less than it had: each ring after the first guards its finalists
against the chain's incumbent (its parent's final/ choice), not the baseline
(docs/guard.md#the-incumbent).

One chain is shared: r1 chooses `good` over the baseline; r2 continues it with `good`
again and `mid` (better than the baseline, worse than `good`); r3 continues r2 with
`great`, clearly better than `good`. A fourth ring, r2b, continues r1 with
`guard.against: baseline`: today's behaviour, stated in its summary.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ringtools import make_candidate, make_task, snakemake, write_config

pytestmark = pytest.mark.e2e

GUARDED = {"search": ["proxy"], "guard": ["guard"], "final": "final"}
BASELINE = {"mean": 0.5, "sd": 0.01, "noise_key": "b"}
GOOD = {"mean": 0.7, "sd": 0.01, "noise_key": "g"}
MID = {"mean": 0.6, "sd": 0.01, "noise_key": "m"}
GREAT = {"mean": 0.9, "sd": 0.01, "noise_key": "x"}


def ring(work: Path, ring_id: str, candidates: dict, previous: str | None, **config) -> Path:
    cands = work / f"{ring_id}-candidates"
    for name, behaviour in candidates.items():
        make_candidate(cands / name, **behaviour)
    if previous is None:
        config.update(task=str(work / "task"))
        config["baseline"] = str(make_candidate(work / "baseline" / "baseline", **BASELINE))
    # A continuation inherits the task and the baseline (keys left out); its candidates differ.
    path = write_config(work, ring_id=ring_id, candidates=str(cands), continue_from=previous,
                        **config)  # fmt: skip
    snakemake(work, path)
    return work / "runs" / ring_id


def final_of(ring_dir: Path) -> dict:
    return json.loads((ring_dir / "final" / "FINAL.json").read_text())


def held_program(ring_dir: Path) -> dict:
    """What final/solution/ would run: its behaviour file."""
    return json.loads((ring_dir / "final" / "solution" / "behaviour.json").read_text())


def summary(ring_dir: Path) -> str:
    proc = subprocess.run([sys.executable, "-m", "ringflow", "summary", str(ring_dir)],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return proc.stdout


@pytest.fixture(scope="module")
def chain(tmp_path_factory) -> dict[str, Path]:
    work = tmp_path_factory.mktemp("incumbent")
    make_task(work, roles=GUARDED)
    rings = {"r1": ring(work, "r1", {"good": GOOD}, None)}
    rings["r2"] = ring(work, "r2", {"good": GOOD, "mid": MID}, "runs/r1")
    rings["r3"] = ring(work, "r3", {"great": GREAT}, "runs/r2")
    rings["r2b"] = ring(work, "r2b", {"good": GOOD, "mid": MID}, "runs/r1",
                        guard={"against": "baseline"})  # fmt: skip
    return rings


def test_the_first_ring_chooses_against_the_baseline(chain):
    final = final_of(chain["r1"])
    assert final["decision"] == "candidate" and final["chosen"] == "n001-good"
    assert final["guard_against"] == "baseline" and final["reference"] == "n000-baseline"
    assert final["incumbent"] is None


def test_a_continuation_keeps_its_parents_choice_not_the_baseline(chain):
    final = final_of(chain["r2"])
    # The incumbent was seated and stays: final/ holds r1's choice, not the baseline.
    assert final["decision"] == "incumbent", final["reason"]
    assert held_program(chain["r2"]) == {**GOOD, "sd": 0.01, "weights": False}
    incumbent = final["incumbent"]
    assert incumbent["parent_ring"] == "r1" and incumbent["chosen_in"] == "r1"
    assert final["guard_against"] == "incumbent"
    assert final["baseline"] == "n000-baseline"  # still the configured baseline
    good = final["reference"]
    assert final["chosen"] == good
    # The incumbent is what finalists are guarded against, never a finalist itself.
    assert good not in [row["node"] for row in final["finalists"]]


def test_a_candidate_better_than_the_baseline_but_not_the_incumbent_does_not_replace_it(chain):
    final = final_of(chain["r2"])
    mid = next(v for v in final["verdicts"] if v["node"].endswith("-mid"))
    assert mid["eligible"] and not mid["replace"]
    assert mid["guard"]["against"] == final["reference"]
    assert mid["guard"]["against_role"] == "incumbent"
    # It was compared with the incumbent on this ring's own fresh guard seeds: it loses.
    assert all(d < 0 for d in mid["guard"]["differences"])
    assert "incumbent kept" in final["reason"]
    # Against the baseline it would have won: the final view says so.
    assert final["final_view"]["reference"] > final["final_view"]["baseline"]
    text = summary(chain["r2"])
    assert "final decision: incumbent -> " in text
    assert "guarded against: the incumbent" in text


def test_a_clearly_better_candidate_replaces_the_incumbent_and_the_chain_page_shows_both(chain):
    final = final_of(chain["r3"])
    assert final["decision"] == "candidate" and final["chosen"].endswith("-great")
    assert final["guard_against"] == "incumbent"
    assert final["incumbent"]["chosen_in"] == "r1"  # r2 kept r1's choice
    gain = final["improvement_over_reference"]
    assert gain["difference"] == pytest.approx(0.2, abs=0.05)
    assert held_program(chain["r3"])["mean"] == GREAT["mean"]
    text = summary(chain["r3"])
    assert "r1: n001-good replaced the baseline n000-baseline" in text
    assert "r2: kept the incumbent" in text and "(chosen in r1)" in text
    assert "r3: " in text and "replaced the incumbent" in text
    subprocess.run([sys.executable, "-m", "ringflow", "report", "--chain", str(chain["r3"])],
                   check=True, capture_output=True)  # fmt: skip
    page = (chain["r3"] / "chain.html").read_text()
    table = page[page.index('id="chain-decisions"') :]
    table = table[: table.index("</table>")]
    assert table.count("<tr>") == 4  # the header and three rings
    assert "baseline n000-baseline" in table and "incumbent" in table
    assert "(chosen in r1)" in table
    report = (chain["r3"] / "report.html").read_text()
    history = report[report.index('id="incumbent-history"') :]
    history = history[: history.index("</p>")]
    assert "r2: kept the incumbent n001-good (chosen in r1)" in history
    assert "replaced the incumbent n001-good" in history


def test_no_ring_of_the_chain_deploys_less_than_its_parent(chain):
    for child, parent in (("r2", "r1"), ("r3", "r2")):
        mine = final_of(chain[child])["final_view"]["chosen"]
        theirs = final_of(chain[parent])["final_view"]["chosen"]
        assert mine >= theirs - 0.05, (child, mine, parent, theirs)


def test_guard_against_baseline_is_todays_behaviour_and_says_so(chain):
    final = final_of(chain["r2b"])
    # Guarded against the baseline: `mid` beats it and replaces r1's better choice.
    assert final["guard_against"] == "baseline" and final["reference"] == "n000-baseline"
    assert final["decision"] == "candidate" and final["chosen"].endswith("-mid")
    assert any("does not keep the chain's incumbent" in w for w in final["warnings"])
    lock = json.loads((chain["r2b"] / "RING.json").read_text())
    assert lock["config"]["guard"]["against"] == "baseline"
    text = summary(chain["r2b"])
    assert "guard.against: baseline" in text
    # `good`, guarded in r1 on the same rows, is neither guarded nor reviewed again.
    selection = chain["r2b"] / "selection"
    first = json.loads((selection / "verdict-1.json").read_text())
    assert first["node"].endswith("-good") and first["outcome"] == "guarded_before"
    assert first["review"] is None and not (selection / f"review-{first['node']}.json").exists()
    assert (selection / f"review-{final['chosen']}.json").exists()
