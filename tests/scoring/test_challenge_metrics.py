"""rEM_k, DICE and its interval, micro-averaging, Fisher's test, breakdowns and the echo rate,
on hand-built outcomes whose numbers can be checked by hand (and against scipy/statsmodels)."""

from __future__ import annotations

import math

import pytest

from evaluator.scoring import challenge as cm
from evaluator.scoring.challenge import TripleOutcome


def test_rem_k_follows_the_papers_examples():
    assert cm.rem_k("from 26 metres", "26 metres") is True
    assert cm.rem_k("he scored from 26 metres away", "26 metres") is False  # 6 words > 5
    assert cm.rem_k("he scored from 26 metres away", "26 metres", k=6) is True
    assert cm.rem_k("26", "26 metres") is False
    assert cm.rem_k("Naomi daniel", "Naomi Daniel") is True  # case-insensitive (documented)
    assert cm.rem_k(None, "x") is False


def outcome(b, i, c, *, category="Modal negation", count=1, echo=False, n=0):
    return TripleOutcome(f"q{n}", category, count, b, i, c, echo)


def test_dice_counts_interventions_among_triples_with_baseline_and_control_right():
    outcomes = ([outcome(True, True, True)] * 3 + [outcome(True, False, True)] * 7
                + [outcome(False, True, True)] * 50 + [outcome(True, True, False)] * 40)
    result = cm.dice(outcomes)
    assert (result.successes, result.n, result.value) == (3, 10, 0.3)
    margin = 1.959963984540054 * math.sqrt(0.3 * 0.7 / 10)
    assert result.lo == pytest.approx(0.3 - margin) and result.hi == pytest.approx(0.3 + margin)
    statsmodels = pytest.importorskip("statsmodels.stats.proportion")
    lo, hi = statsmodels.proportion_confint(3, 10, alpha=0.05, method="normal")
    assert (result.lo, result.hi) == (pytest.approx(max(lo, 0)), pytest.approx(hi))


def test_dice_is_undefined_without_any_baseline_and_control_success():
    result = cm.dice([outcome(False, True, True), outcome(True, True, False)])
    assert result.n == 0 and result.value is None and result.lo is None
    assert "undefined" in result.percent()


def test_micro_average_pools_counts_rather_than_averaging_rates():
    a, b = cm.normal_proportion(1, 10), cm.normal_proportion(50, 100)
    pooled = cm.micro_average([a, b])
    assert (pooled.successes, pooled.n) == (51, 110)
    assert pooled.value == pytest.approx(51 / 110) != pytest.approx((0.1 + 0.5) / 2)


def test_fisher_exact_test_matches_a_hand_computed_table():
    # table [[8, 2], [1, 5]]: hypergeometric two-sided p = 0.0350 (scipy agrees)
    p = cm.fisher_test(cm.normal_proportion(8, 10), cm.normal_proportion(1, 6))
    assert p == pytest.approx(0.03496503, abs=1e-6)
    assert cm.fisher_test(cm.normal_proportion(5, 10), cm.normal_proportion(5, 10)) == 1.0


def test_breakdowns_echo_and_consistency():
    outcomes = [
        outcome(True, True, True, category="Modal negation", count=1),
        outcome(True, False, True, category="Modal negation", count=2, echo=True),
        outcome(True, False, True, category="Explicit Negation", count=2, echo=False),
        outcome(True, False, True, category="Explicit Negation", count=3, echo=True),
        outcome(False, False, False, category="Explicit Negation", count=3),
    ]
    by_cat = cm.breakdown(outcomes, "category")
    assert (by_cat["Modal negation"].successes, by_cat["Modal negation"].n) == (1, 2)
    assert (by_cat["Explicit Negation"].successes, by_cat["Explicit Negation"].n) == (0, 2)
    by_count = cm.breakdown(outcomes, "count")
    assert {k: (v.successes, v.n) for k, v in by_count.items()} == {1: (1, 1), 2: (0, 2),
                                                                     3: (0, 1)}
    echo = cm.baseline_echo(outcomes)
    assert (echo.successes, echo.n) == (2, 3)
    assert (cm.consistency(outcomes).successes, cm.consistency(outcomes).n) == (1, 5)


def test_score_triples_applies_rem_to_each_part_and_detects_the_baseline_echo():
    def part(answer):
        return {"data": [{"paragraphs": [{"context": "", "qas": [
            {"id": "t1", "question": "Who?", "answers": [{"text": answer, "answer_start": 0}],
             "sam": {"category": "Adverbial Modification", "count": 2,
                     "baseline_answer": "Naomi Daniel"}}]}]}]}
    parts = {"baseline": part("Naomi Daniel"), "intervention": part("Amanda Collins"),
             "control": part("Amanda Collins")}
    preds = {"baseline": {"t1": "Naomi Daniel"}, "intervention": {"t1": "Naomi Daniel"},
             "control": {"t1": "by Amanda Collins"}}
    [o] = cm.score_triples(parts, preds)
    assert (o.b, o.i, o.c, o.echoed_baseline, o.count) == (True, False, True, True, 2)


def test_relative_change_reproduces_sugawara_table_9():
    # Table 9, Has-ans: 82.6 -> 41.9 is printed as -49.3 (rounded inputs: within 0.5)
    assert cm.relative_change(41.9, 82.6) == pytest.approx(-49.3, abs=0.5)
    assert cm.relative_change(1.0, 0.0) is None


def test_per_seed_scores_give_mean_and_spread():
    from evaluator.scoring.squad_v1 import Unit

    units = [Unit("a@s1", 1.0, 1.0, "p", "a", False), Unit("b@s1", 0.0, 0.5, "p", "a", False),
             Unit("a@s2", 0.0, 0.0, "p", "a", False), Unit("b@s2", 0.0, 0.5, "p", "a", False)]
    from evaluator.data.derive import base_question_id

    summary = cm.per_seed_scores(units, lambda q: base_question_id(q)[1])
    assert summary["em"].per_seed == {1: 50.0, 2: 0.0}
    assert summary["f1"].mean == pytest.approx(50.0)
    assert summary["f1"].sd == pytest.approx(math.sqrt(2) * 25.0)
