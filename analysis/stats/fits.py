"""Trend fits of new-set accuracy on original accuracy, and effective robustness.

Following Miller et al. 2020, y (score on the new set) is regressed on x (score on the
reference set) by OLS over models, on two scales:

* ``linear``: raw percentages;
* ``probit``: both axes through the inverse normal CDF of score/100. Scores of 0 or 100
  would map to infinity, so proportions are clipped to [EPS, 1 - EPS] first, EPS = 1e-4
  (0.01 points). Systems that score exactly 0 exist (a reader with nothing to find on an
  ablated set), and where a fit holds one its slope depends on EPS: the fit counts them
  (`Fit.clipped`) and `fit_notes` says so.

Humans are never fitted. The band is a bootstrap over models (resample models with
replacement, refit, take percentiles of the prediction at each grid point); the slope
interval is the usual OLS t interval from statsmodels.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.stats import norm

from analysis.sources.tidy import METRICS, new_testsets, paired

EPS = 1e-4
SCALES = ("linear", "probit")
DEFAULT_BOOT = 1000
DEFAULT_SEED = 0
GRID_POINTS = 101


def to_scale(score, scale: str) -> np.ndarray:
    """Percent -> the axis the fit is done on."""
    score = np.asarray(score, dtype=float)
    if scale == "linear":
        return score
    if scale == "probit":
        return norm.ppf(np.clip(score / 100.0, EPS, 1 - EPS))
    raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")


def from_scale(value, scale: str) -> np.ndarray:
    """The fit's axis -> percent."""
    value = np.asarray(value, dtype=float)
    if scale == "linear":
        return value
    if scale == "probit":
        return 100.0 * norm.cdf(value)
    raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")


@dataclass
class Fit:
    """One OLS fit; grid and band are in percent, coefficients in the fit's own scale."""

    testset: str
    metric: str
    scale: str
    slope: float
    intercept: float
    r2: float
    slope_lo: float
    slope_hi: float
    n_models: int
    n_boot: int
    seed: int
    grid: np.ndarray = field(repr=False)
    line: np.ndarray = field(repr=False)
    band_lo: np.ndarray = field(repr=False)
    band_hi: np.ndarray = field(repr=False)
    labels: tuple[str, ...] = ()  # the models, in the order of `cooks`
    cooks: np.ndarray | None = field(repr=False, default=None)  # Cook's distance per model
    clipped: int = 0  # models with a score clipped to [EPS, 1 - EPS] on the probit scale

    def influential(self) -> list[tuple[str, float, float]]:
        """(model, Cook's distance, cutoff) for each model that alone moves the fit: a
        distance above the median of F(2, n - 2) (Cook's own yardstick: removing the point
        moves the coefficients past the centre of their joint confidence region)."""
        if self.cooks is None or self.n_models < 4:
            return []
        from scipy import stats  # lazy: scipy loads in a second; only influence needs it

        cutoff = float(stats.f.ppf(0.5, 2, self.n_models - 2))
        return [(label or str(i), float(d), cutoff)
                for i, (label, d) in enumerate(zip(self.labels or [""] * len(self.cooks),
                                                   self.cooks, strict=True)) if d > cutoff]

    def predict(self, x) -> np.ndarray:
        """Predicted new-set score (percent) at original score x (percent)."""
        return from_scale(self.intercept + self.slope * to_scale(x, self.scale), self.scale)

    def row(self) -> dict:
        return {"testset": self.testset, "metric": self.metric, "scale": self.scale,
                "slope": self.slope, "intercept": self.intercept, "r2": self.r2,
                "slope_lo": self.slope_lo, "slope_hi": self.slope_hi,
                "n_models": self.n_models, "n_boot": self.n_boot, "seed": self.seed}


def fit_xy(x, y, scale: str = "linear", *, testset: str = "", metric: str = "",
           n_boot: int = DEFAULT_BOOT, seed: int = DEFAULT_SEED, level: float = 0.95,
           grid=None, labels=None) -> Fit:
    """OLS of y on x (both percent) on the given scale, with a bootstrap band over models."""
    import statsmodels.api as sm  # lazy: statsmodels loads in seconds; tidy frames need none

    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < 3:
        raise ValueError(f"need at least 3 models to fit {testset} {metric}, got {len(x)}")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError(f"{testset} {metric}: a score is missing or not a number")
    tx, ty = to_scale(x, scale), to_scale(y, scale)
    if np.ptp(tx) == 0:
        raise ValueError(f"{testset} {metric}: every one of the {len(x)} models has the same "
                         f"reference score, so there is no slope to fit")
    res = sm.OLS(ty, sm.add_constant(tx)).fit()
    lo, hi = res.conf_int(alpha=1 - level)[1]
    if grid is None:
        grid = np.linspace(x.min(), x.max(), GRID_POINTS)
    grid = np.asarray(grid, dtype=float)
    tg = to_scale(grid, scale)
    band_lo, band_hi = bootstrap_band(tx, ty, tg, n_boot, seed, level)
    # R² of a constant y (every system at the floor, say) is 0/0: undefined, not the -inf or
    # 1.0 that rounding noise in the residuals makes of it
    r2 = float(res.rsquared) if np.ptp(ty) > 0 else float("nan")
    return Fit(testset, metric, scale, float(res.params[1]), float(res.params[0]),
               r2, float(lo), float(hi), len(x), n_boot, seed, grid,
               from_scale(res.params[0] + res.params[1] * tg, scale),
               from_scale(band_lo, scale), from_scale(band_hi, scale),
               tuple(map(str, labels)) if labels is not None else (),
               np.asarray(res.get_influence().cooks_distance[0]),
               _clipped(x, y) if scale == "probit" else 0)


def _clipped(x: np.ndarray, y: np.ndarray) -> int:
    """How many models have a score the probit scale clips (within EPS of 0 or 100)."""
    outside = [(v / 100.0 < EPS) | (v / 100.0 > 1 - EPS) for v in (x, y)]
    return int((outside[0] | outside[1]).sum())


def bootstrap_band(tx: np.ndarray, ty: np.ndarray, tgrid: np.ndarray, n_boot: int, seed: int,
                   level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Percentile band of OLS predictions at tgrid over model resamples (closed-form OLS).

    Resamples where every drawn x is equal have no slope and are skipped.
    """
    if n_boot <= 0:
        nan = np.full(len(tgrid), np.nan)
        return nan, nan.copy()
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(tx), size=(n_boot, len(tx)))
    bx, by = tx[idx], ty[idx]
    mx, my = bx.mean(axis=1, keepdims=True), by.mean(axis=1, keepdims=True)
    sxx = ((bx - mx) ** 2).sum(axis=1)
    ok = np.ptp(bx, axis=1) > 0  # not sxx > 0: a mean of equal floats may miss them by an ulp
    slope = ((bx - mx) * (by - my)).sum(axis=1)[ok] / sxx[ok]
    intercept = my[ok, 0] - slope * mx[ok, 0]
    pred = intercept[:, None] + slope[:, None] * tgrid[None, :]
    alpha = 1 - level
    return (np.percentile(pred, 100 * alpha / 2, axis=0),
            np.percentile(pred, 100 * (1 - alpha / 2), axis=0))


def fit_panel(df: pd.DataFrame, testset: str, metric: str, scale: str, **kw) -> Fit:
    """Fit one (testset, metric, scale) panel over the models (never humans) in df."""
    pairs = paired(df, testset, metric)
    models = pairs[pairs["kind"] == "model"]
    return fit_xy(models["x"], models["y"], scale, testset=testset, metric=metric,
                  labels=list(models["model"]), **kw)


def fit_all(df: pd.DataFrame, testsets=None, metrics=METRICS, scales=SCALES,
            **kw) -> list[Fit]:
    """Every (testset, metric, scale) fit; panels that cannot be fitted (fewer than 3 models,
    or every model at the same reference score) are skipped, and `fit_notes` says why."""
    out = []
    for t in testsets or new_testsets(df):
        for m in metrics:
            for s in scales:
                try:
                    out.append(fit_panel(df, t, m, s, **kw))
                except ValueError:
                    continue
    return out


def fit_notes(df: pd.DataFrame, fits: list[Fit], testsets=None, metrics=METRICS) -> list[str]:
    """One line for each thing a reader of these fits should know: a panel left unfitted (too
    few models, a score that is not a number, or no spread in the reference scores), a probit
    fit through a clipped score, and a model that alone drives a fit."""
    fitted = {(f.testset, f.metric) for f in fits}
    notes = []
    for t in testsets or new_testsets(df):
        for m in metrics:
            if (t, m) in fitted:
                continue
            pairs = paired(df, t, m)
            models = pairs[pairs["kind"] == "model"] if not pairs.empty else pairs
            n = len(models)
            if 0 < n < 3:
                notes.append(f"{n} model{'s' * (n != 1)} on {t} ({m}): at least 3 are "
                             f"needed for a fit")
            elif n and models[["x", "y"]].isna().any().any():
                notes.append(f"{t} ({m}): a model's score is missing or not a number, so the "
                             f"panel is not fitted")
            elif n and models["x"].nunique() == 1:
                notes.append(f"{t} ({m}): all {n} models have the same reference score, so "
                             f"there is no slope to fit")
    for f in fits:
        if f.clipped:
            notes.append(f"{f.testset} {f.metric} (probit): {f.clipped} model"
                         f"{'s' * (f.clipped != 1)} score 0 or 100, which the probit scale "
                         f"clips to {100 * EPS:g} points from the edge; the slope depends on "
                         f"that choice")
        for label, distance, cutoff in f.influential():
            notes.append(f"{f.testset} {f.metric} ({f.scale}): {label} alone moves the fit "
                         f"(Cook's distance {distance:.2f}, above {cutoff:.2f}); read its "
                         f"slope with care")
    return notes


def fit_table(fits: list[Fit]) -> pd.DataFrame:
    """The fit numbers as a table (one row per fit)."""
    cols = ["testset", "metric", "scale", "slope", "intercept", "r2", "slope_lo", "slope_hi",
            "n_models", "n_boot", "seed"]
    return pd.DataFrame([f.row() for f in fits], columns=cols)


def effective_robustness(df: pd.DataFrame, fits: list[Fit]) -> pd.DataFrame:
    """Per model (humans included) and fit: y minus the fit's prediction at x, in points."""
    rows = []
    for f in fits:
        pairs = paired(df, f.testset, f.metric)
        if pairs.empty:
            continue
        pred = f.predict(pairs["x"])
        for (_, p), yhat in zip(pairs.iterrows(), pred):
            rows.append({"model": p["model"], "kind": p["kind"], "testset": f.testset,
                         "metric": f.metric, "scale": f.scale, "x": p["x"], "y": p["y"],
                         "predicted": float(yhat), "effective_robustness": p["y"] - yhat})
    return pd.DataFrame(rows)
