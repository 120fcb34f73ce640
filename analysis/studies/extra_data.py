"""Does more, or more diverse, training data move systems off the trend? (Miller et al. 2020,
section 6.2, with our own approach population.)

The population is every system trained on the base split (the 24 training articles of SQuAD
dev); its trend is the linear OLS of new-set F1 on reference F1 over those systems. Every
system's effective robustness is its new-set score minus the trend at its reference score,
with a 95% interval from three independent errors combined in quadrature: the new-set
score's own (its Student-t interval), the reference score's (times the slope) and the trend's
(the standard error of the mean prediction, as statsmodels gives it). An interval that
excludes 0 puts the system off the trend: its distance from the line is more than its
measurement error.

That is not yet "unlike the population": the population's own systems scatter around their
line by more than their measurement errors (about a third of them are off it by that
test). So each system also gets the population's 95% prediction band at its reference
score (statsmodels' `obs=True` interval: the trend's error and the residual spread, with
Student-t quantiles), as an effective-robustness range `band_lo`..`band_hi`; a system
outside it (`beyond_scatter`) is further from the line than a system of the population
would be 95 times in 100.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import norm, t

from analysis.sources.tidy import new_testsets, paired
from evaluator.data import testsets
from evaluator.jobs.job import parse_system_id

COLUMNS = ["system", "approach", "split", "extra", "testset", "reference", "x", "y",
           "predicted", "effective_robustness", "er_lo", "er_hi", "off_trend", "band_lo",
           "band_hi", "beyond_scatter", "n_population"]
IN_DISTRIBUTION = ("original", "replication")


def extra_kind(split: str, base: str) -> str:
    """'none' for the base split; else whether what it adds is in-distribution (a set of kind
    original or replication at its root) or shifted."""
    if split == base:
        return "none"
    try:
        spec = testsets.get(split).derive
    except Exception:  # a split that no folder defines any more
        return "unknown"
    if spec is None or base not in spec.parents:
        return "other split"
    kinds = {_root_kind(p) for p in spec.parents if p != base}
    return "in-distribution" if kinds <= set(IN_DISTRIBUTION) else "shifted"


def _root_kind(name: str) -> str:
    ts = testsets.get(name)
    while ts.derive is not None and ts.derive.parent is not None:
        ts = testsets.get(ts.derive.parent)
    return ts.kind


def _se(lo: float, hi: float, level: float) -> float:
    """The standard error a symmetric interval implies (0 when it is unknown)."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return 0.0
    return (hi - lo) / (2 * norm.ppf(0.5 + level / 2))


@dataclass(frozen=True)
class LinearTrend:
    """The OLS line of y on x over a population, with what statsmodels' `OLS(y, [1, x])`
    gives for it (coefficients, residuals, the mean prediction's standard error, the
    Student-t prediction interval for a new system) in closed form: the site fits one per
    system left out, over a thousand per report, which statsmodels' objects make seconds."""

    params: np.ndarray  # intercept, slope
    resid: np.ndarray  # y minus the line, in the population's order
    mean_x: float
    sxx: float  # the sum of squared deviations of x from its mean
    sigma2: float  # the residual variance, SSR / (n - 2)

    @property
    def n(self) -> int:
        return len(self.resid)

    def predict(self, x, level: float = 0.95) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                      np.ndarray]:
        """At each x: the line's value, its standard error, and the `level` prediction
        interval of a new system's y (statsmodels' `conf_int(obs=True)`)."""
        x = np.asarray(x, dtype=float)
        mean = self.params[0] + self.params[1] * x
        se_mean = np.sqrt(self.sigma2 * (1 / self.n + (x - self.mean_x) ** 2 / self.sxx))
        half = t.ppf(0.5 + level / 2, self.n - 2) * np.sqrt(self.sigma2 + se_mean ** 2)
        return mean, se_mean, mean - half, mean + half


def linear_trend(population: pd.DataFrame) -> LinearTrend:
    """The OLS trend of y on x over a `tidy.paired` frame (at least three systems)."""
    return fit_line(population["x"].to_numpy(float), population["y"].to_numpy(float))


def spread(x: np.ndarray) -> bool:
    """Whether reference scores `x` differ at all: a population whose systems all score the
    same there has no trend to place anything against (its callers leave such a set out)."""
    return bool(np.ptp(x) != 0)


def fit_line(x: np.ndarray, y: np.ndarray) -> LinearTrend:
    """`LinearTrend` of y on x (arrays of three or more values, x with `spread`)."""
    if len(x) < 3:
        raise ValueError(f"a trend needs at least 3 systems, got {len(x)}")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("a system's score is missing or not a number: no trend")
    if not spread(x):
        raise ValueError(f"all {len(x)} systems have the same reference score: no trend")
    mean_x, mean_y = x.mean(), y.mean()
    sxx = float(((x - mean_x) ** 2).sum())
    slope = float(((x - mean_x) * (y - mean_y)).sum()) / sxx
    intercept = float(mean_y - slope * mean_x)
    resid = y - (intercept + slope * x)
    return LinearTrend(np.array([intercept, slope]), resid, float(mean_x), sxx,
                       float(resid @ resid) / (len(x) - 2))


def place(fit: LinearTrend, points: pd.DataFrame | list[dict], level: float = 0.95
          ) -> list[dict]:
    """Where each of `points` (a `tidy.paired` frame of one new set and metric, or its
    records) lands against a `linear_trend`: the trend's prediction at its x, its effective
    robustness with its interval and whether that excludes 0 (`off_trend`), and the
    population's prediction band as an effective-robustness range (`beyond_scatter`)."""
    records = points.to_dict("records") if isinstance(points, pd.DataFrame) else points
    slope = float(fit.params[1])
    z = norm.ppf(0.5 + level / 2)
    predicted, se_mean, band_lo, band_hi = fit.predict([p["x"] for p in records], level)
    out = []
    for p, mean, se_line, lo, hi in zip(records, predicted, se_mean, band_lo, band_hi,
                                        strict=True):
        # the band as effective robustness: the score minus each edge of the band
        spread_lo, spread_hi = p["y"] - float(hi), p["y"] - float(lo)
        se = math.sqrt(_se(p["y_lo"], p["y_hi"], level) ** 2
                       + (slope * _se(p["x_lo"], p["x_hi"], level)) ** 2 + float(se_line) ** 2)
        er = p["y"] - float(mean)
        out.append({"predicted": float(mean), "effective_robustness": er,
                    "er_lo": er - z * se, "er_hi": er + z * se,
                    "off_trend": bool(er - z * se > 0 or er + z * se < 0),
                    "band_lo": spread_lo, "band_hi": spread_hi,
                    "beyond_scatter": bool(spread_lo > 0 or spread_hi < 0)})
    return out


def table(df: pd.DataFrame, base: str = "squad-dev-train", metric: str = "f1",
          level: float = 0.95) -> pd.DataFrame:
    """Effective robustness of every trained system on every new set, against the trend of
    the systems trained on `base`."""
    rows = []
    for testset in new_testsets(df):
        pairs = paired(df, testset, metric)
        parsed = [parse_system_id(m) for m in pairs["model"]]
        pairs = pairs.assign(approach=[p["approach"] if p else None for p in parsed],
                             split=[p["split"] if p else None for p in parsed])
        pairs = pairs[pairs["split"].notna()]
        population = pairs[pairs["split"] == base]
        if len(population) < 3 or not spread(population["x"].to_numpy(float)):
            continue
        placements = place(linear_trend(population), pairs, level)
        for p, placed in zip(pairs.to_dict("records"), placements, strict=True):
            rows.append({"system": p["model"], "approach": p["approach"], "split": p["split"],
                         "extra": extra_kind(p["split"], base), "testset": testset,
                         "reference": p["x_testset"], "x": p["x"], "y": p["y"], **placed,
                         "n_population": len(population)})
    return pd.DataFrame(rows, columns=COLUMNS)


def with_counterparts(table: pd.DataFrame, base: str = "squad-dev-train") -> pd.DataFrame:
    """The rows of systems trained with extra data and of their counterparts on `base` (the
    same approach, size, seed and hyperparameters): the comparison section 6.2 makes, out of
    a table that also holds the whole population."""
    def same_but_split(system: str) -> tuple | None:
        parts = parse_system_id(system)
        return None if parts is None else (parts["approach"], parts["size"], parts["seed"],
                                           parts["hp"])

    extra = table[table["split"] != base]
    wanted = {same_but_split(s) for s in extra["system"]}
    base_rows = table[(table["split"] == base)
                      & table["system"].map(lambda s: same_but_split(s) in wanted)]
    return pd.concat([base_rows, extra]).sort_values(["testset", "system"]).reset_index(
        drop=True)


def summary(table: pd.DataFrame, base: str = "squad-dev-train") -> pd.DataFrame:
    """Whether extra data moves systems off the trend, per kind of extra data and new set:
    systems, how many sit above / on / below the trend (their interval excludes 0 above,
    holds it, excludes it below), how many of them lie above / below the population's own
    scatter (its prediction band), the mean effective robustness, and the mean change from
    the counterpart trained on `base` alone (same approach, size, seed and settings)."""
    def counterpart(system: str) -> tuple | None:
        parts = parse_system_id(system)
        return None if parts is None else (parts["approach"], parts["size"], parts["seed"],
                                           parts["hp"])

    base_er = {(counterpart(r.system), r.testset): r.effective_robustness
               for r in table[table["split"] == base].itertuples()}
    rows = []
    for (extra, testset), part in table[table["split"] != base].groupby(["extra", "testset"]):
        change = [r.effective_robustness - base_er[key] for r in part.itertuples()
                  if (key := (counterpart(r.system), r.testset)) in base_er]
        rows.append({"extra": extra, "testset": testset, "systems": len(part),
                     "above": int((part["er_lo"] > 0).sum()),
                     "on": int(((part["er_lo"] <= 0) & (part["er_hi"] >= 0)).sum()),
                     "below": int((part["er_hi"] < 0).sum()),
                     "above_scatter": int((part["band_lo"] > 0).sum()),
                     "below_scatter": int((part["band_hi"] < 0).sum()),
                     "mean_er": float(part["effective_robustness"].mean()),
                     "with_counterpart": len(change),
                     "mean_change": float(np.mean(change)) if change else math.nan})
    return pd.DataFrame(rows, columns=["extra", "testset", "systems", "above", "on", "below",
                                       "above_scatter", "below_scatter", "mean_er",
                                       "with_counterpart", "mean_change"])
