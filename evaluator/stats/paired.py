"""Two systems on the same questions: is one better, and is one more robust?

Scores of two systems on one test set are paired by question, so their difference is judged
on the per-question differences, not on two independent intervals (which overlap far more
often than the difference is uncertain):

- EM: McNemar's exact test on the discordant questions (A right and B wrong, or the
  reverse): a two-sided binomial test of b against b + c at p = 1/2.
- F1 and EM: the mean difference with a paired bootstrap interval (questions resampled with
  their pair, `n_boot` times, percentile interval), and a paired t-test beside it.
- Robustness: with the same two systems on an original set too, the difference of their
  drops, (A_orig - A_new) - (B_orig - B_new), with a bootstrap that resamples questions
  within each set, pairs kept; a positive value means A loses more than B.

Inputs are per-question values in [0, 1] in question order; outputs in percentage points.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class PairedDiff:
    metric: str
    n: int
    a: float  # percent
    b: float
    diff: float  # a - b, percentage points
    lo: float
    hi: float
    level: float
    t_p: float | None  # paired t-test, two-sided; None for one question (no df left)
    mcnemar_p: float | None = None  # EM only
    a_only: int | None = None  # EM: questions A gets right and B does not
    b_only: int | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def mcnemar_exact(a_only: int, b_only: int) -> float:
    """Two-sided exact McNemar p-value from the two discordant counts."""
    if a_only + b_only == 0:
        return 1.0
    return float(stats.binomtest(a_only, a_only + b_only, 0.5).pvalue)


def _bootstrap_means(values: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """Means of `n_boot` resamples (with replacement) of the rows of `values`."""
    idx = rng.integers(0, len(values), size=(n_boot, len(values)))
    return values[idx].mean(axis=1)


def paired(metric: str, a: np.ndarray, b: np.ndarray, *, n_boot: int = 10_000, seed: int = 0,
           level: float = 0.95) -> PairedDiff:
    """A's and B's scores on the same questions, their difference and its uncertainty."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.size == 0:
        raise ValueError("paired scores need the same, non-empty, questions")
    d = a - b
    boots = _bootstrap_means(d, n_boot, np.random.default_rng(seed))
    alpha = (1 - level) / 2
    lo, hi = np.quantile(boots, [alpha, 1 - alpha])
    if d.size < 2:  # a t-test of one difference has no degrees of freedom: no test
        t_p = None
    elif np.all(d == d[0]):  # no spread: t is 0/0 (no difference) or infinite (a sure one)
        t_p = 1.0 if d[0] == 0 else 0.0
    else:
        t_p = float(stats.ttest_rel(a, b).pvalue)
    extra = {}
    if metric == "em":
        a_only, b_only = int(((a == 1) & (b == 0)).sum()), int(((a == 0) & (b == 1)).sum())
        extra = {"mcnemar_p": mcnemar_exact(a_only, b_only), "a_only": a_only,
                 "b_only": b_only}
    return PairedDiff(metric, int(a.size), 100 * a.mean(), 100 * b.mean(), 100 * d.mean(),
                      100 * float(lo), 100 * float(hi), level, t_p, **extra)


def unpaired_half_width(a: np.ndarray, b: np.ndarray, level: float = 0.95) -> float:
    """Half the width of the interval the difference would get if the two systems' scores
    were treated as independent samples (Welch's t), in percentage points: what pairing
    saves."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = np.sqrt(va + vb)
    if se == 0:
        return 0.0
    dof = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    return float(100 * stats.t.ppf(0.5 + level / 2, dof) * se)


@dataclass(frozen=True)
class DropDiff:
    metric: str
    drop_a: float  # original minus new, percentage points
    drop_b: float
    diff: float  # drop_a - drop_b
    lo: float
    hi: float
    level: float

    def to_dict(self) -> dict:
        return asdict(self)


def drop_difference(metric: str, original: tuple[np.ndarray, np.ndarray],
                    new: tuple[np.ndarray, np.ndarray], *, n_boot: int = 10_000, seed: int = 0,
                    level: float = 0.95) -> DropDiff:
    """(A_orig - A_new) - (B_orig - B_new) with a bootstrap over the questions of each set,
    each question's pair of scores kept together."""
    rng = np.random.default_rng(seed)
    d_orig = np.asarray(original[0], float) - np.asarray(original[1], float)
    d_new = np.asarray(new[0], float) - np.asarray(new[1], float)
    value = d_orig.mean() - d_new.mean()
    boots = _bootstrap_means(d_orig, n_boot, rng) - _bootstrap_means(d_new, n_boot, rng)
    alpha = (1 - level) / 2
    lo, hi = np.quantile(boots, [alpha, 1 - alpha])
    drop_a = np.mean(original[0]) - np.mean(new[0])
    drop_b = np.mean(original[1]) - np.mean(new[1])
    return DropDiff(metric, 100 * float(drop_a), 100 * float(drop_b), 100 * float(value),
                    100 * float(lo), 100 * float(hi), level)
