"""Where a researcher's model lands against the frozen population's trend (`qashift trend`).

The population is the study's systems trained on one split (`results/population.csv`: 106
systems trained on squad-dev-train, scored on its held-out half and on the shifted sets).
Per shifted set, its linear OLS trend of new-set F1 on reference F1 predicts what a system
of the population would score at the model's reference score; the model's effective
robustness is its score minus that prediction, with the interval and the population's 95%
prediction band of `extra_data.place` (one implementation of both). Its rank is among the
population's own residuals: 1 is further above the trend than every system of it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

from analysis.sources.tidy import paired
from analysis.studies.extra_data import fit_line, linear_trend, place, spread
from evaluator.jobs.job import parse_system_id

COLUMNS = ["model", "testset", "reference", "x", "x_lo", "x_hi", "y", "y_lo", "y_hi",
           "predicted", "predicted_lo", "predicted_hi", "effective_robustness", "er_lo",
           "er_hi", "off_trend", "beyond_scatter", "rank", "n_population", "slope"]
MIN_POPULATION = 5  # fewer systems make no trend worth placing a model against
TIE = 1e-9  # residuals closer than this are one (scores are kept to 4 decimals)


def population_of(df: pd.DataFrame, base: str) -> pd.DataFrame:
    """The rows of the systems trained on `base`: the population whose trend is the yardstick."""
    parsed = df["model"].map(parse_system_id)
    return df[parsed.map(lambda p: bool(p) and p["split"] == base)]


def land(population: pd.DataFrame, own: pd.DataFrame, testsets: Sequence[str],
         metric: str = "f1", level: float = 0.95) -> pd.DataFrame:
    """One row per model of `own` and set of `testsets` that both it and at least
    MIN_POPULATION systems of `population` are scored on (tidy frames; the model's reference
    score on the population's reference set): its scores, the trend's prediction with the
    prediction band, its effective robustness with interval, and its rank."""
    rows = []
    for testset in testsets:
        pop = paired(population, testset, metric)
        if len(pop) < MIN_POPULATION or not spread(pop["x"].to_numpy(float)):
            continue
        points = paired(own, testset, metric)
        points = points[points["x_testset"] == pop["x_testset"].iloc[0]]
        if points.empty:
            continue
        fit = linear_trend(pop)
        for p, placed in zip(points.to_dict("records"), place(fit, points, level),
                             strict=True):
            er = placed["effective_robustness"]
            rows.append({"model": p["model"], "testset": testset, "reference": p["x_testset"],
                         **{k: p[k] for k in ("x", "x_lo", "x_hi", "y", "y_lo", "y_hi")},
                         "predicted": placed["predicted"],
                         "predicted_lo": p["y"] - placed["band_hi"],
                         "predicted_hi": p["y"] - placed["band_lo"],
                         "effective_robustness": er, "er_lo": placed["er_lo"],
                         "er_hi": placed["er_hi"], "off_trend": placed["off_trend"],
                         "beyond_scatter": placed["beyond_scatter"],
                         "rank": 1 + int((fit.resid > er + TIE).sum()), "n_population": len(pop),
                         "slope": float(fit.params[1])})
    return pd.DataFrame(rows, columns=COLUMNS)


def each_against_the_others(pairs: pd.DataFrame, level: float = 0.95) -> pd.DataFrame:
    """Every model of a `tidy.paired` frame (one new set and metric) placed as `land` places
    one, against the linear trend of all the other models (humans are placed, never part of
    a trend); none where fewer than MIN_POPULATION others. The site's model pages show it.
    Columns: model, x, y, predicted, effective_robustness, er_lo, er_hi, rank,
    n_population, intercept, slope."""
    is_model = (pairs["kind"] == "model").to_numpy()
    x, y = pairs["x"].to_numpy(float), pairs["y"].to_numpy(float)
    records, rows = pairs.to_dict("records"), []
    for i, p in enumerate(records):
        others = is_model.copy()
        others[i] = False
        if others.sum() < MIN_POPULATION or not spread(x[others]):
            continue
        fit = fit_line(x[others], y[others])
        [placed] = place(fit, records[i:i + 1], level)
        er = placed["effective_robustness"]
        rows.append({"model": p["model"], "x": p["x"], "y": p["y"],
                     "predicted": placed["predicted"], "effective_robustness": er,
                     "er_lo": placed["er_lo"], "er_hi": placed["er_hi"],
                     "rank": 1 + int((fit.resid > er + TIE).sum()),
                     "n_population": fit.n, "intercept": float(fit.params[0]),
                     "slope": float(fit.params[1])})
    return pd.DataFrame(rows, columns=["model", "x", "y", "predicted", "effective_robustness",
                                       "er_lo", "er_hi", "rank", "n_population", "intercept",
                                       "slope"])


def figure(population: pd.DataFrame, row: dict, n_boot: int = 200):
    """One set's population scatter with its linear trend and bootstrap band, the model's
    point and intervals marked (a row of `land`)."""
    from analysis import figures  # lazy: matplotlib, for --out alone
    from analysis.stats import fits  # lazy: with figures

    fit = fits.fit_panel(population, row["testset"], "f1", "linear", n_boot=n_boot)
    fig = figures.panel_grid(population, [(row["testset"], "f1", "linear")],
                             {(row["testset"], "f1", "linear"): fit}, ncols=1, panel_size=5.2)
    ax = fig.axes[0]
    ax.errorbar([row["x"]], [row["y"]], xerr=_error_bar(row["x"], row["x_lo"], row["x_hi"]),
                yerr=_error_bar(row["y"], row["y_lo"], row["y_hi"]), fmt="*",
                color="crimson", ms=14, mec="black", zorder=5,
                label=f"{row['model']}: {row['effective_robustness']:+.2f} off the trend")
    ax.legend(loc="upper left", fontsize=7, frameon=False)
    return fig


def _error_bar(value: float, lo: float, hi: float) -> list | None:
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return None
    return [[value - lo], [hi - value]]
