"""Hostile outputs fail their own cell and nothing else: predictions nested 200,000 deep, a
60 MB answer, a bug in the evaluator itself. The honest cell beside them finishes."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from evaluator.cli.main import evaluate_cmd
from evaluator.pipeline import cell
from evaluator.scoring.predictions import MAX_ANSWER_CHARS
from evaluator.store.store import Store
from tests.conftest import FIRST_WORD, tiny_registry, write_command_bundle

NESTED = """import sys
open(sys.argv[2], "w").write("[" * 200_000 + "]" * 200_000)
"""
HUGE = """import json, sys
doc = json.load(open(sys.argv[1]))
ids = [q["id"] for a in doc["data"] for p in a["paragraphs"] for q in p["qas"]]
answers = {qid: "the" for qid in ids}
answers[ids[0]] = "word " * (12 << 20)  # 60 MB in one answer
json.dump(answers, open(sys.argv[2], "w"))
"""

MANY_VALUES = """import json, sys
doc = json.load(open(sys.argv[1]))
ids = [q["id"] for a in doc["data"] for p in a["paragraphs"] for q in p["qas"]]
answers = {qid: "the" for qid in ids}
answers["padding"] = [0] * 1_000_000  # 2 MB of text, some 30 MB once parsed
json.dump(answers, open(sys.argv[2], "w"))
"""
MANY_GENERATIONS = FIRST_WORD + """import os
open(os.path.join(os.path.dirname(sys.argv[2]), "generations.json"), "w").write(
    '{"a": [' + ",".join(["{}"] * 1_000_000) + "]}")  # 3 MB, some 75 MB once parsed
"""
WORDY = FIRST_WORD.replace('p["context"].split()[0]', '", ".join(p["context"].split()[:30])')


@pytest.fixture
def registry(tmp_path, small_dev, monkeypatch, workspace):
    _, subs = tiny_registry(tmp_path, monkeypatch, {"toy": small_dev}, {"honest": FIRST_WORD})
    return {"subs": subs, "workspace": workspace}


def run_all() -> dict:
    result = CliRunner().invoke(evaluate_cmd, ["-b", "all", "-t", "toy", "--runner", "local",
                                               "--json"])
    assert result.exit_code == 1, result.output  # a failed cell: non-zero, after all cells
    return json.loads(result.stdout)


def test_deeply_nested_predictions_fail_their_cell_and_the_matrix_goes_on(registry):
    write_command_bundle(registry["subs"], "nested", NESTED)
    doc = run_all()
    assert [r["bundle"] for r in doc["results"]] == ["honest"]
    [failed] = doc["failed"]
    assert failed["bundle"] == "nested" and failed["failure_class"] == "malformed-predictions"
    store = Store(registry["workspace"])
    assert [r["bundle"] for r in store.results()] == ["honest"]
    assert [f["failure_class"] for f in store.failures()] == ["malformed-predictions"]


def test_a_bug_in_the_evaluator_is_that_cells_recorded_internal_error(registry, monkeypatch):
    write_command_bundle(registry["subs"], "unlucky", FIRST_WORD.replace("split()[0]",
                                                                     "split()[1]"))
    real = cell.score
    calls = []

    def flaky(questions, predictions, scorer):
        calls.append(1)
        if len(calls) == 2:  # the second cell the matrix scores
            raise ZeroDivisionError("a bug in scoring")
        return real(questions, predictions, scorer)

    monkeypatch.setattr(cell, "score", flaky)
    doc = run_all()
    assert len(doc["results"]) == 1
    [failed] = doc["failed"]
    assert failed["failure_class"] == "internal-error" and "ZeroDivisionError" in \
        failed["message"]
    store = Store(registry["workspace"])
    [failure] = store.failures()
    assert failure["failure_class"] == "internal-error"
    assert "Traceback" in store.get_object(failure["log_sha256"]).decode()


def test_a_60_mb_answer_is_scored_wrong_with_a_warning(registry):
    write_command_bundle(registry["subs"], "huge", HUGE)
    result = CliRunner().invoke(evaluate_cmd, ["-b", "huge", "-t", "toy", "--runner", "local",
                                               "--json"])
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.stdout)["results"]
    assert row["em"]["value"] < 100.0 and row["missing"] == 0
    store = Store(registry["workspace"])
    [stored] = store.results()
    log = store.get_object(stored["log_sha256"]).decode()
    assert f"longer than {MAX_ANSWER_CHARS:,} characters scored as wrong" in log
    assert json.loads(stored["run_record"])["details"]["oversize_answers"] == 1


def test_predictions_of_many_tiny_values_are_refused_before_parsing(registry):
    """Parsed JSON costs memory per value, not per byte: the number of values is capped for
    the set's size, far above what long answers full of commas need."""
    write_command_bundle(registry["subs"], "many", MANY_VALUES)
    write_command_bundle(registry["subs"], "wordy", WORDY)
    doc = run_all()
    assert sorted(r["bundle"] for r in doc["results"]) == ["honest", "wordy"]
    [failed] = doc["failed"]
    assert failed["bundle"] == "many" and failed["failure_class"] == "malformed-predictions"
    assert "JSON values, over the" in failed["message"] and "questions" in failed["message"]


def test_a_generations_file_of_many_tiny_values_is_refused_before_parsing(registry):
    """The generations file a generative run keeps has a guard of the same kind: on its
    objects and lists, as generated text may hold any number of commas."""
    write_command_bundle(registry["subs"], "chatty", MANY_GENERATIONS)
    doc = run_all()
    assert [r["bundle"] for r in doc["results"]] == ["honest"]
    [failed] = doc["failed"]
    assert failed["bundle"] == "chatty" and failed["failure_class"] == "malformed-predictions"
    assert "chatty x toy: generations.json may hold 1,000,003 JSON objects and lists, over " \
        "the 141,506 allowed for 1,057 questions" in failed["message"]
