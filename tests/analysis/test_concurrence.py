"""Kendall tau-b and Pearson r between test sets, with a seeded bootstrap over models."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import kendalltau, pearsonr

from analysis.sources.tidy import frame, from_csv, from_squadshifts_published
from analysis.stats.concurrence import _tau, as_matrix, concurrence, score_matrix


def test_point_estimates_are_scipys_over_common_models(tmp_path):
    rows = ["model,testset,metric,value"]
    vals = {"a": (90, 80, 70), "b": (85, 82, 60), "c": (80, 70, 65), "d": (75, 70, 50)}
    for m, (o, s1, s2) in vals.items():
        rows += [f"{m},squad-test,em,{o}", f"{m},reddit,em,{s1}", f"{m},amazon,em,{s2}"]
    rows += ["e,squad-test,em,60", "e,reddit,em,55"]  # not on amazon: left out of every pair
    path = tmp_path / "c.csv"
    path.write_text("\n".join(rows) + "\n")
    c = concurrence(from_csv(path), "em", n_boot=200, seed=3).set_index(["a", "b"])
    x, y = [90, 85, 80, 75], [80, 82, 70, 70]
    row = c.loc[("squad-test", "reddit")]
    assert row["n_models"] == 4
    assert row["kendall_tau_b"] == pytest.approx(kendalltau(x, y).statistic)
    assert row["pearson_r"] == pytest.approx(pearsonr(x, y).statistic)
    again = concurrence(from_csv(path), "em", n_boot=200, seed=3).set_index(["a", "b"])
    assert np.array_equal(c[["tau_lo", "r_hi"]].to_numpy(), again[["tau_lo", "r_hi"]].to_numpy())


def test_a_set_that_is_both_a_reference_and_compared_is_one_column():
    """my-new-set is compared against my-reference, which is itself compared against
    squad-dev: my-reference is one column, and every pair is computed."""
    vals = {"a": (90, 80, 70), "b": (85, 82, 60), "c": (80, 70, 65), "d": (75, 60, 50)}
    rows = []
    for m, (o, r, w) in vals.items():
        rows += [{"model": m, "testset": "squad-dev", "metric": "f1", "value": o},
                 {"model": m, "testset": "my-reference", "metric": "f1", "value": r,
                  "reference": "squad-dev"},
                 {"model": m, "testset": "my-new-set", "metric": "f1", "value": w,
                  "reference": "my-reference"}]
    df = frame({"kind": "model", **r} for r in rows)
    assert list(score_matrix(df, "f1").columns) == ["my-reference", "squad-dev", "my-new-set"]
    c = concurrence(df, "f1", n_boot=50).set_index(["a", "b"])
    assert len(c) == 3 and c["tau_lo"].notna().all()
    assert c.loc[("my-reference", "my-new-set"), "kendall_tau_b"] == pytest.approx(
        kendalltau([80, 82, 70, 60], [70, 60, 65, 50]).statistic)


@pytest.mark.parametrize("variant", ["a", "b", "c"])
def test_vectorised_bootstrap_tau_equals_the_point_estimate_with_ties(variant):
    rng = np.random.default_rng(0)
    x = np.round(rng.normal(size=25), 1)
    y = x + np.round(rng.normal(size=25), 1)
    idx = rng.integers(0, 25, size=(40, 25))
    expected = [_scipy_tau(x[i], y[i], variant) for i in idx]
    assert _tau(x[idx], y[idx], variant) == pytest.approx(expected)


def _scipy_tau(x, y, variant):
    if variant == "a":  # (concordant - discordant) / all pairs; scipy has b and c only
        pairs = np.sign(x[:, None] - x[None, :]) * np.sign(y[:, None] - y[None, :])
        return pairs.sum() / (len(x) * (len(x) - 1))
    return kendalltau(x, y, variant=variant).statistic


def test_vectorised_tau_is_undefined_for_a_constant_resample():
    x, y = np.array([[1.0, 1.0, 1.0], [1.0, 2.0, 3.0]]), np.array([[1.0, 2.0, 3.0]] * 2)
    for variant in "abc":
        tau = _tau(x, y, variant)
        assert np.isnan(tau[0]) and tau[1] == pytest.approx(1.0)


def test_published_concurrence(shared_data):
    df = from_squadshifts_published(shared_data)
    c = concurrence(df, "f1", n_boot=100)
    assert len(c) == 10 and (c["n_models"] == len(score_matrix(df, "f1"))).all()
    wide = score_matrix(df, "f1")
    row = c[(c["a"] == "squad-test") & (c["b"] == "amazon")].iloc[0]
    assert row["kendall_tau_b"] == pytest.approx(
        kendalltau(wide["squad-test"], wide["amazon"]).statistic)
    assert row["tau_lo"] <= row["kendall_tau_b"] <= row["tau_hi"]
    m = as_matrix(c)
    assert m.loc["amazon", "squad-test"] == m.loc["squad-test", "amazon"]
