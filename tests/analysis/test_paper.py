"""The paper's appendix tables: committed unchanged, joined to results.json row by row."""

from __future__ import annotations

import hashlib
import json

import pandas as pd
import pytest

from analysis.sources import paper
from analysis.sources.tidy import from_squadshifts_published, paired


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("t", paper.TABLES, ids=lambda t: t.file)
def test_committed_tables_are_the_shared_transcriptions_byte_for_byte(t, shared_data):
    assert sha256(paper.DATA / t.file) == sha256(shared_data / "squadshifts-paper" / t.file)


def test_printed_names_lose_braces_and_stop_at_30_characters():
    assert paper.printed("{EAZI} (ensemble)") == "EAZI (ensemble)"
    assert paper.printed("Match-LSTM w/ Ans-Ptr (Ensemble)") == "Match-LSTM w/ Ans-Ptr (Ensembl"
    assert paper.printed("BiDAF + Self Attention + ELMo (ensemble)") == \
        "BiDAF + Self Attention + ELMo"  # the cut leaves a space, which is not printed


def rows(*named_scores):
    return pd.DataFrame([{"name": n, "new": v} for n, v in named_scores])


T = paper.TABLES[0]


def test_a_printed_name_shared_by_two_models_is_settled_by_the_printed_score():
    models = {"Reinforced Mnemonic Reader + A2D (single model)": 85.74,
              "Reinforced Mnemonic Reader + A2D + DA (single model)": 86.184}
    printed = "Reinforced Mnemonic Reader + A"
    assert {paper.printed(n) for n in models} == {printed}
    found = paper.join(T, rows((printed, 86.2), (printed, 85.7)), models, {})
    assert [j.name for j in found] == ["Reinforced Mnemonic Reader + A2D + DA (single model)",
                                       "Reinforced Mnemonic Reader + A2D (single model)"]
    assert {j.method for j in found} == {"printed name + score"}


def test_a_unique_name_whose_score_disagrees_stays_unmatched_with_the_reason():
    found = paper.join(T, rows(("BiDAF (single)", 70.0)), {"BiDAF (single)": 68.0}, {})
    assert found[0].name is None and found[0].method == "unmatched"
    assert "68" in found[0].detail and "70" in found[0].detail


def test_equal_scores_leave_the_row_ambiguous_and_unknown_names_unmatched():
    models = {"Twin model number one, (single model)": 80.04,
              "Twin model number one, (single model) v2": 79.96}
    found = paper.join(T, rows(("Twin model number one, (single", 80.0), ("Nobody", 50.0)),
                       models, {})
    assert [(j.name, j.method) for j in found] == [(None, "ambiguous"), (None, "unmatched")]


def test_two_rows_never_take_one_model():
    found = paper.join(T, rows(("Solo", 80.0), ("Solo", 80.0)), {"Solo": 80.02}, {})
    assert [j.method for j in found] == ["ambiguous", "ambiguous"]


def test_humans_join_by_score_alone():
    humans = {"Human 1": 92.479, "Human 2": 92.399, "Human 3": 92.308}
    found = paper.join(T, rows(("Human-0", 92.5), ("Human-1", 92.4), ("Human-2", 92.3)), {},
                       humans)
    assert [j.name for j in found] == ["Human 1", "Human 2", "Human 3"]


def test_every_row_of_tables_5_11_and_16_joins(shared_data):
    df = from_squadshifts_published(shared_data)
    found = paper.originals(json.loads((shared_data / "squadshifts" / "results.json")
                                       .read_text()))
    assert [j for j in found.joins if not j.matched] == []
    assert len([j for j in found.joins if j.table == 5]) == 107
    assert "Table 16: 93 rows" in found.report() and "Table 16" in df.attrs["coverage"]


@pytest.mark.parametrize("testset", ["new-wiki", "nyt", "reddit", "amazon"])
def test_humans_sit_at_their_own_original_scores(testset, shared_data):
    df = from_squadshifts_published(shared_data)
    for metric, own in (("f1", [94.9, 94.9, 95.6]), ("em", [89.1, 88.7, 90.5])):
        humans = paired(df, testset, metric).query("kind == 'human'").sort_values("model")
        assert humans["model"].tolist() == ["Human 1", "Human 2", "Human 3"]
        assert humans["x"].tolist() == own, (testset, metric)


def test_the_paper_gives_x_and_the_leaderboard_is_the_fallback(shared_data):
    df = from_squadshifts_published(shared_data)
    x = df[df["testset"] == "squad-test"]
    assert (x["source"] == "Miller et al. 2020, Table 5").sum() == 107
    assert (x["source"] == "Miller et al. 2020, Table 11").sum() == 99
    fallback = x[x["source"].str.startswith("SQuAD v1.1 leaderboard")]
    assert len(fallback) == 21 and not x.duplicated(["model", "metric"]).any()
    xlnet = paired(df, "new-wiki", "em").set_index("model").loc["XLNet (single model)"]
    assert (xlnet["x"], xlnet["x_source"]) == (89.9, "Miller et al. 2020, Table 11")
    assert "Paper vs leaderboard" in df.attrs["coverage"]
