"""Effective robustness of systems trained with extra data, against the population's trend."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from scipy.stats import norm

from analysis.sources.tidy import from_csv
from analysis.studies import extra_data

BASE = [("a", 30, 25), ("b", 40, 33), ("c", 50, 42), ("d", 60, 49)]


def frame(tmp_path, extra):
    rows = ["model,testset,metric,value,lo,hi,reference"]
    for approach, x, y in BASE + extra:
        split = "squad-dev-train" if (approach, x, y) in BASE else approach.split("+")[1]
        name = approach.split("+")[0]
        model = f"{name}@{split}/s0"
        rows += [f"{model},squad-dev-heldout,f1,{x},{x - 1},{x + 1},",
                 f"{model},reddit-test,f1,{y},{y - 1},{y + 1},squad-dev-heldout"]
    path = tmp_path / "t.csv"
    path.write_text("\n".join(rows) + "\n")
    return from_csv(path)


def test_effective_robustness_is_the_residual_from_the_base_trend_with_an_interval(tmp_path):
    extra = [("a+squad-dev-train-plus-reddit", 35, 40),
             ("b+squad-dev-train-plus-new-wiki", 45, 37)]
    table = extra_data.table(frame(tmp_path, extra)).set_index("system")
    fit = sm.OLS([y for _, _, y in BASE], sm.add_constant([x for _, x, _ in BASE])).fit()
    shifted = table.loc["a@squad-dev-train-plus-reddit/s0"]
    predicted = fit.params[0] + fit.params[1] * 35
    assert shifted["effective_robustness"] == pytest.approx(40 - predicted)
    se_point = 1 / norm.ppf(0.975)  # each score's interval is +-1
    se = math.sqrt(se_point ** 2 + (fit.params[1] * se_point) ** 2
                   + fit.get_prediction(np.array([[1.0, 35.0]])).se_mean[0] ** 2)
    assert shifted["er_hi"] - shifted["er_lo"] == pytest.approx(2 * norm.ppf(0.975) * se)
    assert shifted["extra"] == "shifted" and shifted["off_trend"]
    indist = table.loc["b@squad-dev-train-plus-new-wiki/s0"]
    assert indist["extra"] == "in-distribution" and not indist["off_trend"]
    assert table.loc["a@squad-dev-train/s0", "extra"] == "none"
    assert (table["n_population"] == 4).all()


def test_fewer_than_three_base_systems_give_no_trend(tmp_path):
    df = frame(tmp_path, [])
    df = df[~df["model"].str.startswith(("c@", "d@"))]
    assert extra_data.table(df).empty


def test_the_command_says_what_is_missing_in_one_line(workspace):
    from click.testing import CliRunner

    from evaluator.cli.main import main

    result = CliRunner().invoke(main, ["extra-data"])
    assert result.exit_code == 1 and len(result.stderr.strip().splitlines()) == 1
    assert "no results store" in result.stderr


def test_the_population_alone_is_one_line_naming_what_is_missing(workspace, tmp_path):
    """A store that holds the population (recorded) but no system trained with extra data:
    one line saying so, not an empty table; --all lists the population's own rows."""
    from click.testing import CliRunner

    from evaluator.cli.main import main

    population = study_table(tmp_path / "population.csv",
                             [(f"b@squad-dev-train/s{i}", x, y)
                              for i, (_, x, y) in enumerate(BASE)])
    result = CliRunner().invoke(main, ["extra-data", "--table", str(population)])
    assert result.exit_code == 1 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
    assert "no system trained with extra data is here beside the 4 trained on " \
        "squad-dev-train" in result.stderr
    listed = CliRunner().invoke(main, ["extra-data", "--table", str(population), "--all"])
    assert listed.exit_code == 0 and "b@squad-dev-train/s1" in listed.stdout


def study_table(path, systems):
    """A study table (the long form `qashift study run --table` writes) of (model, x, y)."""
    rows = ["model,testset,metric,value,lo,hi,reference"]
    for model, x, y in systems:
        rows += [f"{model},squad-dev-heldout,f1,{x},{x - 1},{x + 1},",
                 f"{model},reddit-test,f1,{y},{y - 1},{y + 1},squad-dev-heldout"]
    path.write_text("\n".join(rows) + "\n")
    return path


def test_two_study_tables_make_one_population_and_a_shared_system_counts_once(tmp_path):
    from analysis.sources import load_tables

    population = study_table(tmp_path / "population.csv",
                             [(f"a@squad-dev-train/s{i}", x, y) for i, (_, x, y) in
                              enumerate(BASE)])
    extra = study_table(tmp_path / "extra.csv", [("a@squad-dev-train/s0", 30, 25),
                                                 ("a@squad-dev-train-plus-reddit/s0", 35, 40)])
    table = extra_data.table(load_tables([population, extra], "squad-dev-heldout"))
    assert (table["n_population"] == 4).all()
    assert set(table["system"]) == {f"a@squad-dev-train/s{i}" for i in range(4)} | {
        "a@squad-dev-train-plus-reddit/s0"}


def test_tables_that_disagree_on_a_system_are_refused_in_one_line(tmp_path):
    from analysis.sources import load_tables
    from evaluator.core.errors import UserError

    one = study_table(tmp_path / "one.csv", [("a@squad-dev-train/s0", 30, 25)])
    two = study_table(tmp_path / "two.csv", [("a@squad-dev-train/s0", 30, 26)])
    with pytest.raises(UserError, match=r"a@squad-dev-train/s0 on reddit-test: the tables "
                                        r"disagree on f1 \(25 vs 26\)"):
        load_tables([one, two], "squad-dev-heldout")


def test_the_printed_comparison_keeps_extra_data_systems_and_their_base_counterparts(tmp_path):
    extra = [("a+squad-dev-train-plus-reddit", 35, 40)]
    table = extra_data.table(frame(tmp_path, extra))
    shown = extra_data.with_counterparts(table)
    assert set(shown["system"]) == {"a@squad-dev-train/s0", "a@squad-dev-train-plus-reddit/s0"}
    assert len(table) == 5 and len(shown) == 2


def test_the_command_reads_study_tables_without_a_store(workspace, tmp_path):
    from click.testing import CliRunner

    from evaluator.cli.main import main

    population = study_table(tmp_path / "population.csv",
                             [(f"b@squad-dev-train/s{i}", x, y) for i, (_, x, y) in
                              enumerate(BASE)] + [("b@squad-dev-train-plus-amazon/s0", 50, 48)])
    result = CliRunner().invoke(main, ["extra-data", "--table", str(population),
                                       "--csv", str(tmp_path / "er.csv")])
    assert result.exit_code == 0, result.output
    table_block, _, summary_block = result.stdout.partition("\n\n")
    lines = table_block.splitlines()
    assert any(line.split()[0] == "b@squad-dev-train-plus-amazon/s0" for line in lines[1:])
    assert not any(line.split()[0] == "b@squad-dev-train/s1" for line in lines[1:])
    assert summary_block.startswith("Off the trend?") and "shifted" in summary_block
    assert len(pd.read_csv(tmp_path / "er.csv")) == 5


def test_the_summary_counts_systems_above_on_and_below_the_trend_and_the_change(tmp_path):
    extra = [("a+squad-dev-train-plus-reddit", 35, 40),     # far above the trend
             ("b+squad-dev-train-plus-amazon", 45, 37.5),    # on it
             ("c+squad-dev-train-plus-new-wiki", 50, 30)]    # far below
    table = extra_data.table(frame(tmp_path, extra))
    moved = extra_data.summary(table).set_index(["extra", "testset"])
    shifted = moved.loc[("shifted", "reddit-test")]
    assert (shifted["systems"], shifted["above"], shifted["on"], shifted["below"]) == (2, 1, 1,
                                                                                       0)
    er = table.set_index("system")["effective_robustness"]
    assert shifted["mean_er"] == pytest.approx(
        (er["a@squad-dev-train-plus-reddit/s0"] + er["b@squad-dev-train-plus-amazon/s0"]) / 2)
    assert shifted["mean_change"] == pytest.approx(
        (er["a@squad-dev-train-plus-reddit/s0"] - er["a@squad-dev-train/s0"]
         + er["b@squad-dev-train-plus-amazon/s0"] - er["b@squad-dev-train/s0"]) / 2)
    indist = moved.loc[("in-distribution", "reddit-test")]
    assert (indist["systems"], indist["below"], indist["with_counterpart"]) == (1, 1, 1)


def test_the_population_band_is_the_trends_prediction_interval_and_counts_apart(tmp_path):
    """Off the trend (beyond its own measurement error) is not yet beyond the population's
    scatter: the band is statsmodels' prediction interval for a new system of the population
    (t quantiles, the residual spread included)."""
    extra = [("a+squad-dev-train-plus-reddit", 35, 40),     # far above, beyond the scatter
             ("b+squad-dev-train-plus-amazon", 45, 39.5)]   # off the line, within the band
    table = extra_data.table(frame(tmp_path, extra)).set_index("system")
    fit = sm.OLS([y for _, _, y in BASE], sm.add_constant([x for _, x, _ in BASE])).fit()
    for system, x, y in (("a@squad-dev-train-plus-reddit/s0", 35.0, 40.0),
                         ("b@squad-dev-train-plus-amazon/s0", 45.0, 39.5)):
        [[lo, hi]] = fit.get_prediction(np.array([[1.0, x]])).conf_int(obs=True,
                                                                               alpha=0.05)
        row = table.loc[system]
        assert (row["band_lo"], row["band_hi"]) == pytest.approx((y - hi, y - lo))
    a, b = table.loc["a@squad-dev-train-plus-reddit/s0"], \
        table.loc["b@squad-dev-train-plus-amazon/s0"]
    assert a["off_trend"] and a["beyond_scatter"]
    assert b["off_trend"] and not b["beyond_scatter"]
    moved = extra_data.summary(table.reset_index()).set_index(["extra", "testset"])
    shifted = moved.loc[("shifted", "reddit-test")]
    assert (shifted["above"], shifted["above_scatter"], shifted["below_scatter"]) == (2, 1, 0)
