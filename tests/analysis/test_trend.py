"""`qashift trend`: a researcher's model placed against the frozen population's trend."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from click.testing import CliRunner

from analysis.sources.tidy import from_csv, paired
from analysis.studies import extra_data, trend
from evaluator.cli.figures import report_command
from evaluator.cli.trend import trend_command
from evaluator.store.store import Store
from tests.conftest import REPO
from tests.support.site import by_header, parse, table

POPULATION = REPO / "results" / "population.csv"


@pytest.fixture(scope="module")
def population():
    return trend.population_of(from_csv(POPULATION, reference="squad-dev-heldout"),
                               "squad-dev-train")


def as_own(population, system: str, name: str):
    """One system of the population, renamed: a model whose scores are known exactly."""
    own = population[population["model"] == system].copy()
    own["model"] = name
    return own


def test_a_population_systems_own_effective_robustness_is_its_residual_and_rank(population):
    pairs = paired(population, "reddit-test", "f1")
    fit = sm.OLS(pairs["y"].to_numpy(float), sm.add_constant(pairs["x"].to_numpy(float))).fit()
    residuals = dict(zip(pairs["model"], fit.resid, strict=True))
    system = pairs["model"].iloc[17]
    [row] = trend.land(population, as_own(population, system, "mine"), ["reddit-test"]
                       ).to_dict("records")
    assert row["n_population"] == len(pairs) == 106
    assert row["effective_robustness"] == pytest.approx(residuals[system], abs=1e-9)
    # its own residual is one of the population's, a tie: only those above it count
    assert row["rank"] == 1 + sum(r > residuals[system] + 1e-6 for r in residuals.values())
    prediction = fit.get_prediction(np.array([[1.0, row["x"]]]))
    [[lo, hi]] = prediction.conf_int(obs=True, alpha=0.05)
    assert (row["predicted_lo"], row["predicted_hi"]) == pytest.approx((lo, hi))
    assert row["slope"] == pytest.approx(fit.params[1])
    assert row["er_lo"] < row["effective_robustness"] < row["er_hi"]


def test_the_best_residual_ranks_first_and_a_set_without_the_model_is_left_out(population):
    pairs = paired(population, "amazon-test", "f1")
    fit = sm.OLS(pairs["y"].to_numpy(float), sm.add_constant(pairs["x"].to_numpy(float))).fit()
    best = pairs["model"].iloc[int(np.argmax(fit.resid))]
    own = as_own(population, best, "mine")
    own = own[own["testset"] != "reddit-test"]
    rows = trend.land(population, own, ["amazon-test", "reddit-test"])
    assert list(rows["testset"]) == ["amazon-test"]
    assert rows["rank"].iloc[0] == 1


def test_a_model_without_an_interval_is_placed_with_the_trends_error_alone(population):
    own = as_own(population, population["model"].iloc[0], "constant")
    own["lo"], own["hi"] = math.nan, math.nan
    [row] = trend.land(population, own, ["new-wiki-test"]).to_dict("records")
    assert math.isfinite(row["er_lo"]) and math.isfinite(row["er_hi"])
    assert row["er_hi"] - row["er_lo"] > 0


def test_the_closed_form_trend_is_statsmodels_ols(population):
    """Coefficients, residuals, the mean prediction's standard error and the prediction
    interval of a new system, at two levels, as statsmodels' OLS gives them."""
    pairs = paired(population, "new-wiki-test", "f1")
    x, y = pairs["x"].to_numpy(float), pairs["y"].to_numpy(float)
    ours = extra_data.linear_trend(pairs)
    fit = sm.OLS(y, sm.add_constant(x)).fit()
    assert ours.params == pytest.approx(fit.params, abs=1e-10)
    assert ours.resid == pytest.approx(fit.resid, abs=1e-10)
    at = np.array([0.0, x.min(), 55.5, x.max(), 100.0])
    for level in (0.95, 0.8):
        mean, se_mean, lo, hi = ours.predict(at, level)
        prediction = fit.get_prediction(sm.add_constant(at))
        assert mean == pytest.approx(prediction.predicted_mean, abs=1e-10)
        assert se_mean == pytest.approx(prediction.se_mean, abs=1e-10)
        band = prediction.conf_int(obs=True, alpha=1 - level)
        assert lo == pytest.approx(band[:, 0], abs=1e-9)
        assert hi == pytest.approx(band[:, 1], abs=1e-9)


def test_each_model_is_placed_against_the_statsmodels_trend_of_all_the_others(population):
    pairs = paired(population, "amazon-test", "f1")
    placed = trend.each_against_the_others(pairs).set_index("model")
    assert len(placed) == len(pairs) == 106
    for i in (0, 41, 105):
        model, x = pairs["model"].iloc[i], pairs["x"].iloc[i]
        others = pairs.drop(index=pairs.index[i])
        fit = sm.OLS(others["y"].to_numpy(float),
                     sm.add_constant(others["x"].to_numpy(float))).fit()
        [predicted] = fit.get_prediction(np.array([[1.0, x]])).predicted_mean
        row = placed.loc[model]
        assert (row["intercept"], row["slope"]) == pytest.approx(tuple(fit.params), abs=1e-10)
        assert row["predicted"] == pytest.approx(predicted, abs=1e-10)
        er = pairs["y"].iloc[i] - predicted
        assert row["effective_robustness"] == pytest.approx(er, abs=1e-10)
        assert row["rank"] == 1 + int((fit.resid > er + trend.TIE).sum())
        assert row["n_population"] == 105
        assert row["er_lo"] < er < row["er_hi"]


def test_a_population_without_spread_in_its_reference_scores_gives_no_trend(population):
    models = population["model"].unique()[:6]
    flat = population[population["model"].isin(models)].copy()
    flat.loc[flat["testset"] == "squad-dev-heldout", "value"] = 70.0
    pairs = paired(flat, "reddit-test", "f1")
    assert len(pairs) == 6 and set(pairs["x"]) == {70.0}
    with pytest.raises(ValueError, match="same reference score"):
        extra_data.linear_trend(pairs)
    with pytest.raises(ValueError, match="missing or not a number"):
        extra_data.linear_trend(paired(population, "reddit-test", "f1").assign(y=np.nan))
    assert trend.each_against_the_others(pairs).empty
    assert trend.land(flat, as_own(flat, models[0], "mine"), ["reddit-test"]).empty


@pytest.mark.slow
def test_trend_scores_a_bundle_and_prints_its_place_within_120_columns(workspace, tmp_path):
    """The sliding-window baseline on a clean workspace: its reference and shifted cells are
    run (nothing trained), printed, and the same numbers come as JSON and as a figure."""
    args = ["-b", "sliding-window", "-t", "reddit-test", "--runner", "local"]
    result = CliRunner().invoke(trend_command, [*args, "--out", str(tmp_path / "fig")])
    assert result.exit_code == 0, result.output
    assert max(map(len, result.stdout.splitlines())) <= 120
    assert "106 systems" in result.stdout and "reddit-test" in result.stdout
    store = Store.open_default()
    assert {r["testset"] for r in store.results("sliding-window")} == {"squad-dev-heldout",
                                                                      "reddit-test"}
    assert not store.systems()  # nothing trained
    assert (tmp_path / "fig" / "trend-sliding-window-reddit-test.png").stat().st_size > 10_000
    again = CliRunner().invoke(trend_command, [*args, "--json"])
    [row] = json.loads(again.stdout)["rows"]
    assert f"{row['effective_robustness']:+9.2f}" in result.stdout
    assert f"{row['rank']:>3}/107" in result.stdout
    # the population came from the store, where the committed table was recorded: the same
    # placement as against the table itself
    assert len({r["bundle"] for r in store.results(recorded=True)
                if r.get("source") == "results/population.csv"}) == 106
    own = trend.population_of(from_csv(POPULATION, reference="squad-dev-heldout"),
                              "squad-dev-train").iloc[:0]
    mine = [{"model": "sliding-window", "testset": t, "metric": "f1", "value": v, "lo": lo,
             "hi": hi, "reference": "" if t == "squad-dev-heldout" else "squad-dev-heldout",
             "kind": "model"}
            for t, v, lo, hi in (("squad-dev-heldout", row["x"], row["x_lo"], row["x_hi"]),
                                 ("reddit-test", row["y"], row["y_lo"], row["y_hi"]))]
    [expected] = trend.land(trend.population_of(from_csv(POPULATION,
                                                         reference="squad-dev-heldout"),
                                                "squad-dev-train"),
                            pd.concat([own, pd.DataFrame(mine)]), ["reddit-test"]
                            ).to_dict("records")
    assert row["effective_robustness"] == pytest.approx(expected["effective_robustness"])
    assert (row["er_lo"], row["er_hi"]) == pytest.approx((expected["er_lo"], expected["er_hi"]))
    # one site of the store: the model among the population, placed as `trend` places it
    site = tmp_path / "site"
    built = CliRunner().invoke(report_command, ["--source", "store", "--out", str(site),
                                                "--bootstrap", "0"])
    assert built.exit_code == 0, built.output
    [page] = site.glob("models/sliding-window*.html")
    [placed] = [r for r in by_header(table(parse(page), "trend"))
                if r["Test set"]["text"].startswith("SQuADShifts Reddit")]
    assert placed["Effective robustness"]["text"] == \
        f"{row['effective_robustness']:+.2f}".replace("-", "−")
    assert placed["Rank"]["text"] == f"{row['rank']} of 107"
    board = by_header(table(parse(site / "testsets" / "reddit-test.html"), "board-f1"))
    assert len(board) == 107  # the population and the model, on one trend plot


def test_trend_refuses_a_set_the_population_is_not_scored_on(workspace):
    result = CliRunner().invoke(trend_command, ["-b", "sliding-window", "-t", "squad-dev"])
    assert result.exit_code != 0
    assert "not scored on squad-dev" in result.output
    assert len(result.output.strip().splitlines()) == 1
