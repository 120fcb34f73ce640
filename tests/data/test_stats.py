"""Test-set statistics: the paper's Table 1 counts and the lengths, from the file."""

from __future__ import annotations

import csv

import pytest
from click.testing import CliRunner

from evaluator.cli.main import main
from evaluator.data import stats

DOC = {"data": [
    {"title": "A", "paragraphs": [
        {"context": "one two three four", "qas": [
            {"id": "1", "question": "what is it ?", "answers": [{"text": "two three"},
                                                                 {"text": "two"}]},
            {"id": "2", "question": "where", "answers": [{"text": "four"}]}]},
        {"context": "five six", "qas": [
            {"id": "3", "question": "which one is six", "answers": [{"text": "six"}] * 3}]}]},
    {"title": "B", "paragraphs": [{"context": "seven", "qas": []}]}]}


def test_counts_and_means_of_a_hand_made_document():
    s = stats.of(DOC)
    assert (s.articles, s.paragraphs, s.questions) == (2, 3, 3)
    assert s.paragraph_words == pytest.approx((4 + 2 + 1) / 3)
    assert s.question_words == pytest.approx((4 + 1 + 4) / 3)
    assert s.answer_words == pytest.approx((2 + 1 + 1 + 1 + 1 + 1) / 6)  # repeats count
    assert s.answers_per_question == pytest.approx(6 / 3)


def test_an_empty_document_has_zero_means():
    assert stats.of({"data": []}).row() == dict.fromkeys(stats.COLUMNS, 0)


def test_cli_gives_table_1_for_squad_dev_and_new_wiki(workspace, tmp_path):
    out = tmp_path / "stats.csv"
    result = CliRunner().invoke(main, ["testsets", "stats", "squad-dev", "new-wiki", "--csv",
                                       str(out)])
    assert result.exit_code == 0, result.output
    rows = {r["testset"]: r for r in csv.DictReader(out.open())}
    # Miller et al. 2020, Table 1: SQuAD v1.1 dev 48 articles / 10,570 questions, New
    # Wikipedia 48 / 7,938.
    assert (rows["squad-dev"]["articles"], rows["squad-dev"]["questions"]) == ("48", "10570")
    assert (rows["new-wiki"]["articles"], rows["new-wiki"]["questions"]) == ("48", "7938")
    assert rows["squad-dev"]["paragraphs"] == "2067"
    assert 2.5 < float(rows["new-wiki"]["answers_per_question"]) < 3.5


def test_every_set_at_once_warns_that_derived_ones_are_made_first(tmp_path, small_dev,
                                                                  monkeypatch, workspace):
    """Without names, the command says up front how many sets are derived (made from their
    parent on first read: minutes for the repository's); with names it reads only those."""
    from tests.conftest import write_derived, write_testset

    sets = tmp_path / "sets"
    write_testset(sets, "base", small_dev, reference="base")
    total = sum(len(p["qas"]) for a in small_dev["data"] for p in a["paragraphs"])
    write_derived(sets, "blank", "base", questions=total, reference="base")
    monkeypatch.setenv("QASHIFT_TESTSETS", str(sets))
    every = CliRunner().invoke(main, ["testsets", "stats"])
    assert every.exit_code == 0, every.output
    assert "2 sets, 1 of them derived" in every.stderr and "name sets to read fewer" in \
        every.stderr
    named = CliRunner().invoke(main, ["testsets", "stats", "base"])
    assert named.exit_code == 0 and "derived" not in named.stderr
    assert [line.split()[0] for line in named.stdout.splitlines()[1:]] == ["base"]
