"""The SQuADShifts study's printed fits and drops, reproduced from the data files."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from analysis.sources.tidy import from_squadshifts_published, paired
from analysis.studies import reproduction
from evaluator.cli.main import main

# The captions of Miller et al. 2020, Figures 12 and 13 (slope, R²), the reference here.
PUBLISHED = {
    ("new-wiki", "f1", "linear"): (0.92, 0.99), ("nyt", "f1", "linear"): (1.02, 0.97),
    ("reddit", "f1", "linear"): (1.19, 0.91), ("amazon", "f1", "linear"): (1.36, 0.89),
    ("new-wiki", "f1", "probit"): (0.83, 0.99), ("nyt", "f1", "probit"): (0.89, 0.96),
    ("reddit", "f1", "probit"): (0.84, 0.94), ("amazon", "f1", "probit"): (0.95, 0.94),
    ("new-wiki", "em", "linear"): (0.92, 0.99), ("nyt", "em", "linear"): (0.95, 0.83),
    ("reddit", "em", "linear"): (1.05, 0.82), ("amazon", "em", "linear"): (1.18, 0.85),
    ("new-wiki", "em", "probit"): (0.82, 0.99), ("nyt", "em", "probit"): (0.85, 0.82),
    ("reddit", "em", "probit"): (0.83, 0.83), ("amazon", "em", "probit"): (0.94, 0.88),
}


@pytest.fixture(scope="module")
def published(shared_data):
    return from_squadshifts_published(shared_data)


@pytest.fixture(scope="module")
def table(published):
    return reproduction.fit_comparison(published).set_index(["testset", "metric", "scale"])


def test_all_sixteen_published_fits_within_003(table):
    for key, (slope, r2) in PUBLISHED.items():
        row = table.loc[key]
        assert (row["slope_published"], row["r2_published"]) == (slope, r2)
        assert abs(row["slope"] - slope) < 0.03 and abs(row["r2"] - r2) < 0.03, key
        assert row["slope_diff"] == pytest.approx(row["slope"] - slope)


def test_addonesent_em_fit_and_what_table_16_alone_gives(table):
    row = table.loc[("addonesent", "em", "linear")]
    assert abs(row["slope"] - 1.34) < 0.05 and abs(row["r2"] - 0.80) < 0.03
    assert "Table 16 alone (93 rows" in row["note"] and "slope 1.30" in row["note"]
    assert table.loc[("addonesent", "f1", "linear")]["n_models"] == 0  # no F1 data printed


def test_average_drops_are_means_over_the_same_models(published):
    drops = reproduction.drop_comparison(published)
    reddit = drops.query("testset == 'reddit' and metric == 'f1' and kind == 'model'").iloc[0]
    pairs = paired(published, "reddit", "f1").query("kind == 'model'")
    assert reddit["drop"] == pytest.approx((pairs["x"] - pairs["y"]).mean())
    assert reddit["drop_published"] == 14.0 and abs(reddit["drop"] - 14.0) < 0.5
    assert (drops["drop_diff"].abs() < 0.5).all()  # 3.8 / 14.0 / 17.4 F1 and the rest


def test_reproduce_command_prints_the_table_and_writes_csv(shared_data, tmp_path):
    result = CliRunner().invoke(main, ["reproduce", "--data-dir", str(shared_data),
                                       "--out", str(tmp_path), "--joins"])
    assert result.exit_code == 0, result.output
    assert "Figure 13" in result.output and "Table 16 alone" in result.output
    assert "human by score" in result.output  # --joins prints every decision
    assert (tmp_path / "fits.csv").read_text().count("\n") == 19
