"""A test set's data is checked question by question (`qashift validate` and every load):
valid JSON, the SQuAD v1.1 schema, unique ids, at least one gold answer, each answer where
its answer_start says (unless the folder states why not), the count testset.yaml names. A
folder's own data file can be pinned by sha256: an edit is then refused until it is pinned
again under a new version."""

from __future__ import annotations

import copy
import json
import re
import shlex

import pytest
from click.testing import CliRunner

from evaluator.cli.main import evaluate_cmd, main
from evaluator.core.errors import DataError
from evaluator.data import testsets
from tests.conftest import FIRST_WORD, tiny_registry, write_testset


@pytest.fixture
def sets(tmp_path, small_dev, monkeypatch, workspace):
    sets, _ = tiny_registry(tmp_path, monkeypatch, {"toy": small_dev}, {"honest": FIRST_WORD})
    write_testset(sets, "toy", small_dev, reference="toy")  # a reference validate finds
    return sets


def qa(raw: dict, k: int = 0) -> dict:
    return [q for a in raw["data"] for p in a["paragraphs"] for q in p["qas"]][k]


def validate(*args: str):
    return CliRunner().invoke(main, ["validate", *args])


def broken(sets, small_dev, change) -> str:
    raw = copy.deepcopy(small_dev)
    change(raw)
    (sets / "toy" / "data.json").write_text(json.dumps(raw))
    done = validate(str(sets / "toy"))
    assert done.exit_code == 1
    return done.output


def test_the_shipped_folder_passes(sets):
    done = validate(str(sets / "toy"))
    assert done.exit_code == 0 and "1 folders checked, 0 with a problem" in done.output


def test_a_question_without_answers_is_named_and_refused_by_evaluate(sets, small_dev):
    first = qa(small_dev)
    out = broken(sets, small_dev, lambda raw: qa(raw).update(answers=[]))
    title = small_dev["data"][0]["title"]
    assert f"data.json: article {title!r}, question {first['id']!r}: has no gold answer" in out
    done = CliRunner().invoke(evaluate_cmd, ["-b", "honest", "-t", "toy", "--runner", "local"])
    assert done.exit_code != 0 and "has no gold answer" in done.output


@pytest.mark.parametrize("change, words", [
    (lambda raw: qa(raw, 1).update(id=qa(raw, 0)["id"]), "repeats an id"),
    (lambda raw: qa(raw)["answers"][0].update(answer_start=0), "is not at its answer_start 0"),
    (lambda raw: qa(raw).pop("question"), "has no question text"),
    (lambda raw: raw["data"][0]["paragraphs"][0]["qas"].pop(), "testset.yaml says questions"),
    (lambda raw: raw.pop("data"), "no top-level \"data\" list"),
])
def test_each_content_problem_is_one_line_naming_where(sets, small_dev, change, words):
    assert words in broken(sets, small_dev, change)


def test_truncated_json_is_named(sets):
    path = sets / "toy" / "data.json"
    path.write_text(path.read_text()[:500])
    done = validate(str(sets / "toy"))
    assert done.exit_code == 1 and "is not valid JSON" in done.output


def test_a_stated_reason_lets_answers_move(sets, small_dev):
    out = broken(sets, small_dev, lambda raw: qa(raw)["answers"][0].update(answer_start=0))
    assert "answer_start" in out
    yaml = sets / "toy" / "testset.yaml"
    yaml.write_text(yaml.read_text() + "unaligned_answers: contexts were anonymised\n")
    assert validate(str(sets / "toy")).exit_code == 0


def test_a_pinned_set_refuses_an_edit_until_pinned_again_with_a_new_version(sets, small_dev):
    pinned = validate("--pin", str(sets / "toy"))
    assert pinned.exit_code == 0 and "pinned toy: sha256" in pinned.output
    assert "sha256:" in (sets / "toy" / "testset.yaml").read_text()
    raw = copy.deepcopy(small_dev)
    qa(raw)["question"] += " edited"
    (sets / "toy" / "data.json").write_text(json.dumps(raw))
    with pytest.raises(DataError, match=r"was changed after it was pinned"):
        testsets.from_folder(sets / "toy").load()
    done = CliRunner().invoke(evaluate_cmd, ["-b", "honest", "-t", "toy", "--runner", "local"])
    assert done.exit_code != 0 and "changed after it was pinned" in done.output
    again = validate("--pin", str(sets / "toy"))
    assert again.exit_code != 0 and "pin it under a new version" in again.output
    # the command both refusals advise is one that works, as written
    [advised] = set(re.findall(r"`qashift ([^`]+)`", done.output + again.output))
    assert validate(*shlex.split(advised)[1:]).exit_code == 0
    renewed = testsets.from_folder(sets / "toy")
    assert renewed.version == "2" and renewed.load().questions
