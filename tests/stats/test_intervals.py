"""Intervals are the stated ones: Student-t for F1, Clopper-Pearson for EM, checked against
scipy and statsmodels directly; clustered versions against statsmodels' cluster-robust OLS."""

from __future__ import annotations

import numpy as np
import pytest
import statsmodels.api as sm
from scipy import stats
from statsmodels.stats.proportion import proportion_confint

from evaluator.stats.intervals import binomial_interval, clopper_pearson, level_text, t_interval


@pytest.mark.parametrize("level", [0.9, 0.95, 0.99])
def test_t_interval_equals_scipy(level):
    rng = np.random.default_rng(0)
    values = rng.uniform(0, 1, 500).tolist()
    ours = t_interval(values, level)
    lo, hi = stats.t.interval(level, len(values) - 1, loc=np.mean(values),
                              scale=stats.sem(values))
    assert (ours.lo, ours.hi) == pytest.approx((lo, hi), rel=1e-12)
    assert ours.value == pytest.approx(np.mean(values), rel=1e-15)
    assert ours.method == "student-t"


@pytest.mark.parametrize("k,n", [(0, 10), (10, 10), (3, 17), (9112, 10570), (1, 1)])
@pytest.mark.parametrize("level", [0.9, 0.95])
def test_clopper_pearson_equals_statsmodels_beta(k, n, level):
    lo, hi = proportion_confint(k, n, alpha=1 - level, method="beta")
    assert clopper_pearson(k, n, level) == pytest.approx((lo, hi), abs=1e-12)


def test_binomial_interval_on_hits():
    hits = [1] * 70 + [0] * 30
    ours = binomial_interval(hits)
    assert ours.value == 0.7
    assert (ours.lo, ours.hi) == pytest.approx(proportion_confint(70, 100, 0.05, "beta"))


def _statsmodels_cluster_ci(values, groups, level):
    y = np.asarray(values, dtype=float)
    fit = sm.OLS(y, np.ones_like(y)).fit(cov_type="cluster",
                                         cov_kwds={"groups": np.asarray(groups)}, use_t=True)
    return fit.conf_int(alpha=1 - level)[0], fit.df_resid_inference


def test_clustered_t_interval_equals_statsmodels_cluster_robust_ols():
    rng = np.random.default_rng(1)
    groups = np.repeat(np.arange(40), rng.integers(1, 8, 40))
    effects = rng.normal(0, 0.2, 40)[groups]
    values = np.clip(0.6 + effects + rng.normal(0, 0.2, len(groups)), 0, 1).tolist()
    ours = t_interval(values, 0.95, clusters=groups.tolist())
    (lo, hi), df = _statsmodels_cluster_ci(values, groups, 0.95)
    assert df == 39
    assert (ours.lo, ours.hi) == pytest.approx((lo, hi), rel=1e-10)
    assert ours.hi - ours.lo > t_interval(values).hi - t_interval(values).lo


def test_singleton_clusters_give_the_plain_clopper_pearson_interval_up_to_df():
    hits = [1] * 60 + [0] * 40
    plain = binomial_interval(hits)
    clustered = binomial_interval(hits, clusters=list(range(100)))
    # design effect 1 and df n-1 = G-1: the effective sample size is n itself
    assert (clustered.lo, clustered.hi) == pytest.approx((plain.lo, plain.hi), abs=1e-12)


def test_clustered_clopper_pearson_widens_with_correlated_questions():
    hits = ([1] * 5 + [0] * 5) * 20  # 20 paragraphs of 10 questions, perfectly correlated
    groups = [i // 5 for i in range(200)]  # blocks of 5 identical answers
    plain = binomial_interval(hits)
    clustered = binomial_interval(hits, clusters=groups)
    assert clustered.method == "clopper-pearson-korn-graubard"
    assert clustered.value == plain.value == 0.5
    assert clustered.hi - clustered.lo > 1.8 * (plain.hi - plain.lo)


def test_no_hit_in_clusters_keeps_the_degrees_of_freedom_adjustment():
    """At p = 0 the design effect is taken as 1, but the t(n-1)/t(G-1) scaling stays: the
    interval may not jump from the plain one at k = 0 to a wide one at k = 1."""
    groups = [i // 100 for i in range(500)]  # 5 clusters of 100
    n_eff = 500 * (stats.t.ppf(0.975, 499) / stats.t.ppf(0.975, 4)) ** 2
    none = binomial_interval([0] * 500, clusters=groups)
    assert none.lo == 0.0
    assert none.hi == pytest.approx(stats.beta.ppf(0.975, 1, n_eff), rel=1e-12)
    assert round(100 * none.hi, 3) == 1.463
    assert none.hi > binomial_interval([0] * 500).hi
    every = binomial_interval([1] * 500, clusters=groups)
    assert every.hi == 1.0 and every.lo == pytest.approx(1 - none.hi, rel=1e-12)


def test_one_cluster_gives_no_clustered_interval_for_em_or_f1():
    hits = [1, 0, 1, 1, 0]
    for ours in (binomial_interval(hits, clusters=["a"] * 5), t_interval(hits, clusters=["a"] * 5)):
        assert ours.value == 0.6 and np.isnan(ours.lo) and np.isnan(ours.hi)


def test_level_must_be_a_probability():
    with pytest.raises(ValueError, match="between 0 and 1"):
        t_interval([0.1, 0.2], level=95)


def test_degenerate_inputs_give_nan_bounds_not_errors():
    one = t_interval([0.5])
    assert one.value == 0.5 and np.isnan(one.lo) and np.isnan(one.hi)
    constant = t_interval([0.0] * 10)  # every question wrong: no spread, no interval
    assert constant.value == 0.0 and np.isnan(constant.lo) and np.isnan(constant.hi)
    assert all(np.isnan(stats.t.interval(0.95, 9, loc=0.0, scale=0.0)))  # as scipy's
    clustered = t_interval([1.0] * 10, clusters=["a", "b"] * 5)
    assert np.isnan(clustered.lo) and np.isnan(clustered.hi)


def test_an_f1_interval_is_clipped_to_the_score_range_and_says_so():
    from evaluator.pipeline.cell import cell_intervals
    from evaluator.scoring.squad_v1 import Unit

    # 40 perfect answers and one at 0.5: the t interval's upper end passes 100
    units = [Unit(f"q{i}", 1.0, 1.0, "p", "a") for i in range(40)]
    units.append(Unit("q40", 0.0, 0.5, "p", "a"))
    raw = t_interval([u.f1 for u in units]).scaled(100.0)
    assert raw.hi > 100.0
    _, f1 = cell_intervals(units, 0.95, None)
    assert f1.hi == 100.0 and f1.lo == raw.lo and f1.value == raw.value
    assert f1.method == "student-t, clipped to [0, 100]"
    inside = t_interval([0.5, 0.4, 0.6, 0.5]).scaled(100.0)
    assert inside.clipped(0.0, 100.0) is inside  # nothing cut, method unchanged


def test_a_level_is_written_as_people_write_it():
    assert [level_text(v) for v in (0.95, 0.999, 0.975, 0.99999)] == [
        "95%", "99.9%", "97.5%", "99.999%"]
