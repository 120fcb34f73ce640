"""The tidy table: loaders, provenance of x values, and intervals from totals."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import beta

from analysis.sources import facts
from analysis.sources.csv_import import TableError
from analysis.sources.tidy import (
    COLUMNS,
    em_interval,
    from_csv,
    from_records,
    from_squadshifts_published,
    paired,
    select_models,
)


def record(name, testset, em, f1, **kw):
    return {"bundle": kw.pop("bundle", name.lower()), "name": name, "family": "bert",
            "kind": "model", "testset": testset, "n": 100, "em": em, "f1": f1,
            "em_lo": em - 5, "em_hi": em + 5, "f1_lo": f1 - 4, "f1_hi": f1 + 4,
            "reference_scores": kw.pop("reference_scores", {}), "metadata": kw}


def test_em_interval_is_clopper_pearson_on_the_recovered_count():
    lo, hi = em_interval(80.0, 1000)
    assert lo == pytest.approx(100 * beta.ppf(0.025, 800, 201))
    assert hi == pytest.approx(100 * beta.ppf(0.975, 801, 200))
    assert all(math.isnan(v) for v in em_interval(80.0, None))


def test_squad_test_size_is_9533_by_the_leaderboard_scores(shared_data):
    """Every published EM times 9533/100 is a whole number of questions; 9532/9534 are not."""
    import json

    lb = json.loads((shared_data / "squad-leaderboard" / "out-v1.1.json").read_text())
    ems = np.array([e["scores"]["exact_match"] for e in lb["leaderboard"]
                    if e["scores"]["exact_match"]])
    for n, whole in ((9533, True), (9532, False), (9534, False)):
        k = ems * n / 100
        assert np.allclose(k, np.round(k), atol=1e-6) is whole
    assert facts.SQUAD_TEST["questions"] == 9533 == facts.size("squad-test")


def test_from_records_prefers_own_run_on_reference_then_published_scores():
    recs = [record("A", "squad-dev", 80, 88), record("A", "new-wiki", 70, 80),
            record("B", "new-wiki", 60, 72, reference_scores={
                "testset": "squad-test", "em": 75.0, "f1": 84.0, "source": "leaderboard"})]
    df = from_records(recs)
    assert list(df.columns[:len(COLUMNS)]) == COLUMNS
    p = paired(df, "new-wiki", "f1").set_index("model")
    assert p.at["A", "x"] == 88 and p.at["A", "x_source"] == "run"
    assert p.at["B", "x"] == 84 and p.at["B", "x_source"] == "published: leaderboard"
    assert p.at["A", "y_lo"] == 76 and p.at["A", "family"] == "bert"
    # Published F1 totals get no interval; published EM gets Clopper-Pearson on n=9533.
    b = df[(df["model"] == "B") & (df["testset"] == "squad-test")].set_index("metric")
    assert math.isnan(b.at["f1", "lo"]) and b.at["em", "n"] == 9533
    assert b.at["em", "lo"] == pytest.approx(em_interval(75.0, 9533)[0])


def test_metadata_becomes_columns_and_selects_models():
    recs = [record("A", "new-wiki", 70, 80, extra_data=True),
            record("B", "new-wiki", 60, 72, extra_data=False)]
    df = from_records(recs)
    assert set(select_models(df, {"extra_data": True})["model"]) == {"B"}


def test_from_csv_documented_columns(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("model,testset,metric,value,n,kind,extra_data\n"
                    "m1,squad-test,em,80,1000,,no\nm1,reddit,em,60,1000,,no\n"
                    "m1,reddit,f1,70,,,no\nh,reddit,f1,90,,human,\n")
    df = from_csv(path)
    assert set(df.loc[df["testset"] == "reddit", "reference"]) == {"squad-test"}
    assert df.loc[df["testset"] == "squad-test", "reference"].iat[0] == ""
    em = df[(df["testset"] == "reddit") & (df["metric"] == "em")].iloc[0]
    assert (em["lo"], em["hi"]) == pytest.approx(em_interval(60, 1000))
    assert df.loc[df["model"] == "h", "kind"].iat[0] == "human"
    assert not df["extra_data"].iloc[0]
    with pytest.raises(TableError, match="line 1: no score column"):
        bad = tmp_path / "bad.csv"
        bad.write_text("model,value\nx,1\n")
        from_csv(bad)


def test_published_frame(shared_data):
    df = from_squadshifts_published(shared_data)
    counts = df[df["metric"] == "f1"].groupby("testset").size()
    assert counts.to_dict() == {"amazon": 116, "new-wiki": 108, "nyt": 108, "reddit": 100,
                                "squad-test": 115}
    assert df.loc[df["metric"] == "f1", "lo"].isna().all()
    em = df[(df["metric"] == "em") & (df["testset"] == "nyt")]
    assert em["lo"].notna().all() and (em["n"] == 10065).all()
    xlnet = paired(df, "new-wiki", "em").set_index("model").loc["XLNet (single model)"]
    assert xlnet["y"] == pytest.approx(84.165)
    assert xlnet["x"] == 89.9  # Table 11 of the paper; the leaderboard says 89.898
    assert "New-Wiki models" in df.attrs["coverage"]
