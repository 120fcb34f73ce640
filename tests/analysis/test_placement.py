"""A submission placed on the trend (what its page shows): the trend's placement as `qashift
trend` gives it, and a paired comparison on the same questions with the nearest population
system whose per-question scores the store holds."""

from __future__ import annotations

import shutil

import pytest

from analysis.studies import placement, trend
from evaluator.api.evaluation import evaluate
from evaluator.store.store import Store
from tests.conftest import FIRST_WORD, REPO, write_command_bundle

SYSTEM = "match-lstm@squad-dev-train~250/s2/h50ebaf69"  # among the nearest to first-word
NEW_SET = "addonesent-heldout"  # the population's smallest new set (its scorer's unit: a
# source question, the worst of its adversarial variants)


@pytest.mark.slow
def test_a_submission_lands_on_the_trend_and_is_paired_with_a_near_system(
        workspace, tmp_path, monkeypatch):
    subs = tmp_path / "subs"  # the submission, and the approach of the frozen system
    write_command_bundle(subs, "first-word", FIRST_WORD)
    for folder in ("match-lstm", "_libraries"):
        shutil.copytree(REPO / "submissions" / folder, subs / folder)
    monkeypatch.setenv("QASHIFT_SUBMISSIONS", str(subs))
    store = Store(workspace)
    mine = evaluate(bundles=["first-word"], testsets=["squad-dev-heldout", NEW_SET],
                    runner="local", store=store)
    results = [o.result.to_dict() for o in mine.report.outcomes]
    alone = placement.place(store, "first-word", [r for r in results
                                                  if r["testset"] == NEW_SET])
    assert alone["rows"] == [] and "submit it on squad-dev-heldout too" in alone["missing"]

    before = placement.place(store, "first-word", results)
    [row] = before["rows"]
    pop = placement.population(store)
    [expected] = trend.land(pop, placement.own_frame("first-word", results), [NEW_SET]
                            ).to_dict("records")
    assert row["effective_robustness"] == pytest.approx(expected["effective_robustness"])
    assert row["rank"] == expected["rank"] and before["figures"][NEW_SET]
    nearest = before["paired"][NEW_SET]
    assert nearest["against"] is None and "per-question scores" in nearest["why"]

    theirs = evaluate(bundles=[SYSTEM], testsets=[NEW_SET], runner="local", store=store)
    [other] = [o.result.to_dict() for o in theirs.report.outcomes]
    after = placement.place(store, "first-word", results)["paired"][NEW_SET]
    assert after["against"] == SYSTEM and after["nearest"] == nearest["nearest"] != SYSTEM
    [own] = [r for r in results if r["testset"] == NEW_SET]
    paired = after["paired"]
    assert paired["n"] == own["n"] == other["n"]
    assert paired["a"] == pytest.approx(own["f1"]["value"], abs=1e-9)  # the official totals
    assert paired["b"] == pytest.approx(other["f1"]["value"], abs=1e-9)
    assert paired["diff"] == pytest.approx(paired["a"] - paired["b"], abs=1e-9)
    assert paired["lo"] < paired["diff"] < paired["hi"]
