"""Adaptivity and distribution gaps, and rank changes."""

from __future__ import annotations

import pytest

from analysis.sources.tidy import from_csv, from_squadshifts_published
from analysis.stats.gaps import average_gaps, gaps, rank_changes


@pytest.fixture
def table(tmp_path):
    rows = ["model,testset,metric,value,kind"]
    data = {"a": (90, 85, 70), "b": (80, 76, 66), "c": (70, 64, 50), "h": (82, 83, 80)}
    for m, (o, nw, rd) in data.items():
        kind = "human" if m == "h" else "model"
        rows += [f"{m},squad-test,f1,{o},{kind}", f"{m},new-wiki,f1,{nw},{kind}",
                 f"{m},reddit,f1,{rd},{kind}"]
    path = tmp_path / "g.csv"
    path.write_text("\n".join(rows) + "\n")
    return from_csv(path)


def test_gaps_split_the_total_drop(table):
    g = gaps(table, "f1").set_index(["model", "testset"])
    a = g.loc[("a", "reddit")]
    assert (a["adaptivity_gap"], a["distribution_gap"], a["total_drop"]) == (5, 15, 20)
    assert g.loc[("a", "new-wiki"), "distribution_gap"] == 0
    mean = average_gaps(g.reset_index()).set_index(["kind", "testset"])
    assert mean.loc[("model", "reddit"), "adaptivity_gap"] == pytest.approx((5 + 4 + 6) / 3)
    assert mean.loc[("model", "reddit"), "distribution_gap"] == pytest.approx((15 + 10 + 14) / 3)
    assert mean.loc[("human", "reddit"), "n_models"] == 1


def test_rank_changes(table):
    r = rank_changes(table, "reddit", "f1").set_index("model")
    assert "h" not in r.index
    assert r.loc["a", ["rank_original", "rank_new", "delta"]].tolist() == [1, 1, 0]


def test_published_gaps_add_up(shared_data):
    df = from_squadshifts_published(shared_data)
    g = gaps(df, "f1")
    assert (g["adaptivity_gap"] + g["distribution_gap"] - g["total_drop"]).abs().max() < 1e-9
    mean = average_gaps(g).set_index(["kind", "testset"])
    assert mean.loc[("model", "new-wiki"), "n_models"] == 104
    assert 0 < mean.loc[("model", "new-wiki"), "adaptivity_gap"] < 10
    assert mean.loc[("model", "amazon"), "distribution_gap"] > 5


def test_a_set_measured_against_another_original_gets_no_gaps(tmp_path):
    """AddOneSent against SQuAD dev cannot split a drop whose New-Wiki part starts from SQuAD
    test: its total would be taken from the wrong original."""
    rows = ["model,testset,metric,value,kind,reference",
            "a,squad-test,em,90,model,", "a,squad-dev,em,88,model,",
            "a,new-wiki,em,86,model,squad-test", "a,addonesent,em,70,model,squad-dev",
            "a,reddit,em,60,model,squad-test"]
    path = tmp_path / "g.csv"
    path.write_text("\n".join(rows) + "\n")
    g = gaps(from_csv(path), "em").set_index(["model", "testset"])
    assert ("a", "addonesent") not in g.index
    assert g.loc[("a", "reddit"), "total_drop"] == 30
