"""The sliding-window bundle runs on every local test set through `evaluate`, and the stored
scores equal an independent implementation's (torchmetrics' port of the official script),
question by question and in total."""

from __future__ import annotations

import importlib
import json

import pytest
from click.testing import CliRunner

from evaluator.cli.main import evaluate_cmd
from evaluator.data import testsets

SETS = ["squad-dev", "new-wiki", "reddit", "amazon", "addsent", "addonesent"]


def independent_scores(questions, predictions, scorer: str) -> tuple[float, float]:
    """EM/F1 totals from torchmetrics' per-question functions, grouped for adversarial-min."""
    tm = importlib.import_module("torchmetrics.functional.text.squad")
    per_question = {}
    for q in questions:
        pred = predictions.get(q.id)
        if pred is None:
            per_question[q.id] = (0.0, 0.0)
            continue
        per_question[q.id] = (
            float(tm._metric_max_over_ground_truths(tm._compute_exact_match_score, pred,
                                                    list(q.answers))),
            float(tm._metric_max_over_ground_truths(tm._compute_f1_score, pred,
                                                    list(q.answers))))
    if scorer == "adversarial-min":
        groups: dict[str, list[tuple[float, float]]] = {}
        for qid, s in per_question.items():
            groups.setdefault(qid.split("-")[0], []).append(s)
        units = [(min(e for e, _ in g), min(f for _, f in g)) for g in groups.values()]
    else:
        units = list(per_question.values())
    return (100 * sum(e for e, _ in units) / len(units), 100 * sum(f for _, f in units)
            / len(units))


@pytest.mark.slow
def test_sliding_window_on_six_sets_equals_an_independent_implementation(workspace):
    result = CliRunner().invoke(evaluate_cmd, ["-b", "sliding-window", *sum(
        (["-t", s] for s in SETS), []), "--runner", "local", "--jobs", "2", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    cells = {c["testset"]: c for c in doc["results"]}
    assert set(cells) == set(SETS)
    for set_id in SETS:
        ts = testsets.get(set_id)
        dataset = ts.load()
        with open(cells[set_id]["predictions"]) as handle:
            predictions = json.load(handle)
        assert set(predictions) == {q.id for q in dataset.questions}
        em, f1 = independent_scores(dataset.questions, predictions, ts.scorer)
        assert cells[set_id]["em"]["value"] == pytest.approx(em, abs=1e-3), set_id
        assert cells[set_id]["f1"]["value"] == pytest.approx(f1, abs=1e-3), set_id
        assert cells[set_id]["n"] == (1000 if ts.scorer == "adversarial-min" else
                                      len(dataset.questions))
        assert 3 < cells[set_id]["em"]["value"] < 20 and 10 < cells[set_id]["f1"]["value"] < 35
