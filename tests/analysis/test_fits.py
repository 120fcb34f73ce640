"""Trend fits agree with a direct statsmodels/scipy computation, small and real."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from scipy.stats import f as f_dist
from scipy.stats import linregress, norm

from analysis.sources.tidy import from_csv, from_squadshifts_published, paired
from analysis.stats.fits import (
    EPS,
    bootstrap_band,
    effective_robustness,
    fit_all,
    fit_notes,
    fit_panel,
    fit_xy,
    from_scale,
    to_scale,
)

X = np.array([60.0, 65.0, 70.0, 75.0, 80.0, 85.0, 90.0])
Y = np.array([50.0, 56.0, 59.0, 66.0, 70.0, 77.0, 80.0])


def direct(x, y):
    res = sm.OLS(y, sm.add_constant(x)).fit()
    return res.params[1], res.params[0], res.rsquared, res.conf_int(0.05)[1]


def test_linear_fit_matches_statsmodels_and_scipy():
    f = fit_xy(X, Y, "linear", n_boot=200)
    slope, intercept, r2, (lo, hi) = direct(X, Y)
    lr = linregress(X, Y)
    assert (f.slope, f.intercept, f.r2) == pytest.approx((slope, intercept, r2), rel=1e-12)
    assert f.slope == pytest.approx(lr.slope) and f.r2 == pytest.approx(lr.rvalue ** 2)
    assert (f.slope_lo, f.slope_hi) == pytest.approx((lo, hi))
    assert f.n_models == 7


def test_probit_fit_is_ols_on_inverse_normal_cdf():
    f = fit_xy(X, Y, "probit", n_boot=0)
    slope, intercept, r2, _ = direct(norm.ppf(X / 100), norm.ppf(Y / 100))
    assert (f.slope, f.intercept, f.r2) == pytest.approx((slope, intercept, r2))
    assert f.predict(80.0) == pytest.approx(100 * norm.cdf(intercept + slope * norm.ppf(0.8)))


def test_probit_clips_at_eps():
    assert to_scale(0.0, "probit") == pytest.approx(norm.ppf(EPS))
    assert to_scale(100.0, "probit") == pytest.approx(norm.ppf(1 - EPS))
    assert from_scale(to_scale(37.5, "probit"), "probit") == pytest.approx(37.5)


def test_bootstrap_band_is_seeded_and_matches_a_refit_loop():
    grid = np.array([60.0, 75.0, 90.0])
    lo1, hi1 = bootstrap_band(X, Y, grid, 300, seed=7)
    lo2, hi2 = bootstrap_band(X, Y, grid, 300, seed=7)
    assert np.array_equal(lo1, lo2) and np.array_equal(hi1, hi2)
    rng = np.random.default_rng(7)
    idx = rng.integers(0, len(X), size=(300, len(X)))
    preds = []
    for i in idx:
        if np.ptp(X[i]) == 0:
            continue
        s, c = np.polyfit(X[i], Y[i], 1)
        preds.append(c + s * grid)
    assert lo1 == pytest.approx(np.percentile(preds, 2.5, axis=0))
    assert hi1 == pytest.approx(np.percentile(preds, 97.5, axis=0))
    f = fit_xy(X, Y, n_boot=300, seed=7)
    assert np.all(f.band_lo <= f.line + 1e-9) and np.all(f.line <= f.band_hi + 1e-9)


def test_a_resample_of_one_repeated_score_is_skipped_even_when_its_mean_misses_it_by_an_ulp():
    x, y = np.array([10.7, 80.0, 90.0]), np.array([60.0, 70.0, 85.0])
    assert np.mean([10.7] * 3) != 10.7  # the float mean of three 10.7s is not 10.7
    grid = np.array([10.7, 90.0])
    lo, hi = bootstrap_band(x, y, grid, 1000, seed=0)
    idx = np.random.default_rng(0).integers(0, 3, size=(1000, 3))
    preds = [np.polyval(np.polyfit(x[i], y[i], 1), grid) for i in idx if np.ptp(x[i]) > 0]
    assert lo == pytest.approx(np.percentile(preds, 2.5, axis=0))
    assert hi == pytest.approx(np.percentile(preds, 97.5, axis=0))


def test_humans_are_never_fitted_and_extra_data_can_be_excluded(tmp_path):
    rows = ["model,testset,metric,value,kind,extra_data"]
    for i, (x, y) in enumerate(zip(X, Y)):
        rows += [f"m{i},squad-test,f1,{x},model,{i == 0}", f"m{i},new-wiki,f1,{y},model,{i == 0}"]
    rows += ["human,squad-test,f1,91,human,", "human,new-wiki,f1,20,human,"]
    path = tmp_path / "t.csv"
    path.write_text("\n".join(rows) + "\n")
    df = from_csv(path)
    f = fit_panel(df, "new-wiki", "f1", "linear", n_boot=0)
    assert f.slope == pytest.approx(direct(X, Y)[0]) and f.n_models == 7
    g = fit_panel(df[df["extra_data"] != True], "new-wiki", "f1", "linear", n_boot=0)  # noqa: E712
    assert g.slope == pytest.approx(direct(X[1:], Y[1:])[0]) and g.n_models == 6
    er = effective_robustness(df, [f]).set_index("model")
    assert er.at["human", "effective_robustness"] == pytest.approx(20 - f.predict(91.0)[()])
    assert er.at["m3", "effective_robustness"] == pytest.approx(66 - (f.intercept + f.slope * 75))


def test_cooks_distance_is_the_closed_form_and_names_the_model_that_drives_a_fit(tmp_path):
    x, y = np.append(X, 30.0), np.append(Y, 70.0)  # far to the left, far above the trend
    f = fit_xy(x, y, "linear", n_boot=0, labels=[f"m{i}" for i in range(len(x))])
    design = np.column_stack([np.ones_like(x), x])
    hat = np.diag(design @ np.linalg.inv(design.T @ design) @ design.T)
    resid = y - (f.intercept + f.slope * x)
    mse = (resid ** 2).sum() / (len(x) - 2)
    assert f.cooks == pytest.approx(resid ** 2 / (2 * mse) * hat / (1 - hat) ** 2, rel=1e-9)
    cutoff = f_dist.ppf(0.5, 2, len(x) - 2)
    assert [(m, c) for m, _, c in f.influential()] == [("m7", pytest.approx(cutoff))]
    assert fit_xy(X, Y, "linear", n_boot=0).influential() == []
    rows = ["model,testset,metric,value,kind"]
    for i, (a, b) in enumerate(zip(x, y)):
        rows += [f"m{i},squad-test,f1,{a},model", f"m{i},new-wiki,f1,{b},model"]
    rows += ["m0,reddit,f1,40,model", "m1,reddit,f1,45,model"]  # two models: no fit
    path = tmp_path / "t.csv"
    path.write_text("\n".join(rows) + "\n")
    df = from_csv(path)
    notes = fit_notes(df, fit_all(df, metrics=("f1",), n_boot=0), metrics=("f1",))
    assert "2 models on reddit (f1): at least 3 are needed for a fit" in notes
    assert any(n.startswith("new-wiki f1 (linear): m7 alone moves the fit") for n in notes)


@pytest.fixture(scope="module")
def published(shared_data):
    return from_squadshifts_published(shared_data)


def test_every_published_fit_matches_statsmodels(published):
    fits = fit_all(published, n_boot=50)
    assert len(fits) == 18
    for f in fits:
        p = paired(published, f.testset, f.metric)
        p = p[p["kind"] == "model"]
        slope, intercept, r2, (lo, hi) = direct(to_scale(p["x"], f.scale),
                                                 to_scale(p["y"], f.scale))
        assert (f.slope, f.intercept, f.r2, f.slope_lo, f.slope_hi) == pytest.approx(
            (slope, intercept, r2, lo, hi)), (f.testset, f.metric, f.scale)
        assert f.n_models == len(p)


def test_published_effective_robustness_in_points(published):
    fits = [f for f in fit_all(published, testsets=["amazon"], metrics=["f1"], n_boot=0)]
    er = effective_robustness(published, fits)
    probit = er[(er["scale"] == "probit") & (er["kind"] == "model")]
    f = next(f for f in fits if f.scale == "probit")
    row = probit.iloc[0]
    expected = row["y"] - 100 * norm.cdf(f.intercept + f.slope * norm.ppf(row["x"] / 100))
    assert row["effective_robustness"] == pytest.approx(expected)
    assert isinstance(er, pd.DataFrame) and set(er["kind"]) == {"model", "human"}


@pytest.mark.parametrize("scale", ["linear", "probit"])
def test_r2_of_a_set_every_system_scores_the_same_on_is_undefined(scale):
    """All at 0 EM (an ablation that leaves nothing to find): no variance to explain."""
    fit = fit_xy([20.0, 35.0, 50.0, 61.0], [0.0] * 4, scale, n_boot=0)
    assert np.isnan(fit.r2)
    assert fit.slope == pytest.approx(0.0, abs=1e-9)


def test_a_panel_whose_reference_scores_are_all_equal_is_refused_in_one_line_and_skipped(
        tmp_path):
    """statsmodels drops a constant regressor, so such a fit would have no slope at all."""
    with pytest.raises(ValueError, match="same reference score, so there is no slope"):
        fit_xy([50.0, 50.0, 50.0], [40.0, 42.0, 44.0], "linear", n_boot=0)
    with pytest.raises(ValueError, match="missing or not a number"):
        fit_xy([50.0, np.nan, 60.0], [40.0, 42.0, 44.0], "linear", n_boot=0)
    rows = ["model,testset,metric,value,kind"]
    for i, y in enumerate((40, 42, 44)):
        rows += [f"m{i},squad-test,f1,50,model", f"m{i},new-wiki,f1,{y},model"]
    path = tmp_path / "t.csv"
    path.write_text("\n".join(rows) + "\n")
    df = from_csv(path)
    assert fit_all(df, metrics=("f1",), n_boot=0) == []
    assert fit_notes(df, [], metrics=("f1",)) == [
        "new-wiki (f1): all 3 models have the same reference score, so there is no slope to fit"]
    df = df.copy()  # a frame built in code (a CSV refuses 'nan')
    df.loc[(df["model"] == "m0") & (df["testset"] == "squad-test"), "value"] = np.nan
    assert fit_all(df, metrics=("f1",), n_boot=0) == []
    assert fit_notes(df, [], metrics=("f1",)) == [
        "new-wiki (f1): a model's score is missing or not a number, so the panel is not fitted"]


def test_a_probit_fit_through_a_score_of_zero_says_its_slope_rests_on_the_clip(tmp_path):
    rows = ["model,testset,metric,value,kind"]
    for i, (x, y) in enumerate(((40, 0), (50, 3), (60, 8), (70, 100))):
        rows += [f"m{i},squad-test,em,{x},model", f"m{i},new-wiki,em,{y},model"]
    path = tmp_path / "t.csv"
    path.write_text("\n".join(rows) + "\n")
    df = from_csv(path)
    fits = fit_all(df, metrics=("em",), n_boot=0)
    assert {f.scale: f.clipped for f in fits} == {"linear": 0, "probit": 2}
    assert ("new-wiki em (probit): 2 models score 0 or 100, which the probit scale clips to "
            "0.01 points from the edge; the slope depends on that choice") in fit_notes(
                df, fits, metrics=("em",))
