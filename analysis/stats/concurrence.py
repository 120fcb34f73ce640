"""Concurrence between test sets: do they rank and space the same models alike?

For every pair of test sets: Kendall tau-b (scipy's default variant; ties handled) and
Pearson r over the models scored on *all* the sets compared, so every pair uses the same
models. This is system-level transfer (frozen models on new test sets), not Liu et al.'s
approach-level concurrence; the bootstrap interval over models is our addition (seeded
percentile interval; the paper reports none).
"""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pandas as pd
from scipy.stats import kendalltau

from analysis.sources.tidy import new_testsets

MODE = "system-level (frozen models across test sets)"


def score_matrix(df: pd.DataFrame, metric: str, testsets=None) -> pd.DataFrame:
    """Models x test sets (models only, humans left out), complete rows only.

    Each set is one column, even one that is both a reference and compared against one
    (reddit-test under a set derived from it)."""
    sub = df[(df["metric"] == metric) & (df["kind"] == "model")]
    if testsets is None:
        refs = sorted(set(sub.loc[sub["reference"] != "", "reference"]))
        testsets = refs + new_testsets(sub)
    wide = sub.pivot_table(index="model", columns="testset", values="value", aggfunc="first")
    return wide.reindex(columns=list(dict.fromkeys(testsets))).dropna()


def _pearson(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise Pearson r of two (k, n) arrays."""
    a = a - a.mean(axis=-1, keepdims=True)
    b = b - b.mean(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (a * b).sum(-1) / np.sqrt((a * a).sum(-1) * (b * b).sum(-1))


def _tau(a: np.ndarray, b: np.ndarray, variant: str = "b", chunk: int = 100) -> np.ndarray:
    """Row-wise Kendall tau-a, -b or -c of two (k, n) arrays, ties counted as scipy does.

    Used for the bootstrap only (resamples repeat models, so ties are common); the point
    estimate comes from scipy.stats.kendalltau, and tests check the two agree.
    """
    if variant not in ("a", "b", "c"):
        raise ValueError(f"Kendall variant must be a, b or c, got {variant!r}")
    out = np.empty(len(a))
    n = a.shape[1]
    n0 = n * (n - 1) / 2
    for s in range(0, len(a), chunk):
        sa = np.sign(a[s:s + chunk, :, None] - a[s:s + chunk, None, :]).astype(np.int8)
        sb = np.sign(b[s:s + chunk, :, None] - b[s:s + chunk, None, :]).astype(np.int8)
        score = (sa * sb).sum(axis=(1, 2), dtype=np.int64) / 2  # concordant - discordant
        with np.errstate(invalid="ignore", divide="ignore"):
            if variant == "a":
                tau = score / n0
            elif variant == "b":
                tied_a = ((sa == 0).sum(axis=(1, 2)) - n) / 2
                tied_b = ((sb == 0).sum(axis=(1, 2)) - n) / 2
                tau = score / np.sqrt((n0 - tied_a) * (n0 - tied_b))
            else:  # Stuart's tau-c: m = the fewer distinct values of the two vectors
                m = np.minimum(_distinct(a[s:s + chunk]), _distinct(b[s:s + chunk]))
                tau = 2 * score / (n * n * (m - 1) / m)
            constant = (sa == 0).all(axis=(1, 2)) | (sb == 0).all(axis=(1, 2))
            out[s:s + chunk] = np.where(constant, np.nan, tau)
    return out


def _distinct(rows: np.ndarray) -> np.ndarray:
    """The number of distinct values in each row."""
    ordered = np.sort(rows, axis=1)
    return 1 + (np.diff(ordered, axis=1) != 0).sum(axis=1)


def _percentiles(values: np.ndarray, q: np.ndarray) -> tuple[float, float]:
    """Percentiles over the defined resamples; NaN when none is defined (one model, or every
    resample constant)."""
    defined = values[~np.isnan(values)]
    return tuple(np.percentile(defined, q)) if len(defined) else (np.nan, np.nan)


def concurrence(df: pd.DataFrame, metric: str, testsets=None, n_boot: int = 1000,
                seed: int = 0, level: float = 0.95) -> pd.DataFrame:
    """One row per pair: n_models, tau_b and r with bootstrap percentile intervals."""
    wide = score_matrix(df, metric, testsets)
    n = len(wide)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_boot, n)) if n and n_boot > 0 else np.empty((0, n), int)
    q = 100 * np.array([(1 - level) / 2, (1 + level) / 2])
    rows = []
    for a, b in combinations(wide.columns, 2):
        x, y = wide[a].to_numpy(), wide[b].to_numpy()
        tau = kendalltau(x, y).statistic if n >= 2 else np.nan
        r = float(_pearson(x[None], y[None])[0]) if n >= 2 else np.nan
        taus = _tau(x[idx], y[idx]) if len(idx) else np.array([])
        rs = _pearson(x[idx], y[idx]) if len(idx) else np.array([])
        tau_ci = _percentiles(taus, q)
        r_ci = _percentiles(rs, q)
        rows.append({"a": a, "b": b, "metric": metric, "n_models": n,
                     "kendall_tau_b": float(tau), "tau_lo": tau_ci[0], "tau_hi": tau_ci[1],
                     "pearson_r": r, "r_lo": r_ci[0], "r_hi": r_ci[1],
                     "n_boot": n_boot, "seed": seed, "mode": MODE})
    return pd.DataFrame(rows)


def as_matrix(pairs: pd.DataFrame, stat: str = "kendall_tau_b") -> pd.DataFrame:
    """Symmetric test set x test set matrix of one statistic (diagonal 1)."""
    names = list(dict.fromkeys([*pairs["a"], *pairs["b"]]))
    m = pd.DataFrame(np.eye(len(names)), index=names, columns=names)
    for p in pairs.itertuples(index=False):
        m.loc[p.a, p.b] = m.loc[p.b, p.a] = getattr(p, stat)
    return m
