"""Confidence intervals for test-set scores.

F1 is a mean of bounded per-question scores: Student-t on the per-question values.
EM is a count of exact matches: Clopper-Pearson (exact binomial) on that count.
Both can be clustered, because questions that share a passage are not independent:
the t interval then uses the cluster-robust (CR1) standard error with G - 1 degrees of
freedom, and Clopper-Pearson uses the Korn-Graubard effective sample size (n divided by
the design effect, with the degrees-of-freedom adjustment). The design effect is the CR1
variance over the iid one, p(1 - p)/(n - 1), and the effective size is capped at n before
the adjustment, so that one question per cluster gives the plain interval; Korn and
Graubard's own p(1 - p)/v differs by a factor n/(n - 1) (at most 1e-6 on SQuAD dev). One
cluster gives no interval (NaN bounds): there is no spread between clusters to estimate.

All functions take raw per-question values (0/1 hits, F1 in [0, 1]) and return intervals
in the same units; callers scale to percent.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import asdict, dataclass

DEFAULT_LEVEL = 0.95


@dataclass(frozen=True)
class Interval:
    value: float
    lo: float
    hi: float
    method: str
    level: float

    def scaled(self, factor: float) -> Interval:
        return Interval(self.value * factor, self.lo * factor, self.hi * factor,
                        self.method, self.level)

    def clipped(self, lo: float, hi: float) -> Interval:
        """The interval cut to [lo, hi] (a score's range); the method says when it was cut."""
        if math.isnan(self.lo) or (lo <= self.lo and self.hi <= hi):
            return self
        return Interval(self.value, max(lo, self.lo), min(hi, self.hi),
                        f"{self.method}, clipped to [{lo:g}, {hi:g}]", self.level)

    def to_dict(self) -> dict:
        """Plain values for JSON: a bound that does not exist (one question, one cluster) is
        None (null), never NaN, which strict JSON readers refuse."""
        doc = asdict(self)
        for bound in ("lo", "hi"):
            doc[bound] = None if math.isnan(doc[bound]) else doc[bound]
        return doc


def level_text(level: float) -> str:
    """A confidence level as people write it: 95%, 99.9%, 97.5%, 99.999%."""
    return f"{100 * level:g}%"


def check_level(level: float) -> float:
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level must be strictly between 0 and 1, got {level}")
    return level


def clopper_pearson(k: float, n: float, level: float = DEFAULT_LEVEL) -> tuple[float, float]:
    """Exact binomial interval for k successes in n trials (k, n may be effective, non-integer)."""
    from scipy.stats import beta  # lazy: scipy.stats loads in 2.5 s

    check_level(level)
    if n <= 0:
        return (math.nan, math.nan)
    alpha = 1.0 - level
    lo = 0.0 if k <= 0 else float(beta.ppf(alpha / 2, k, n - k + 1))
    hi = 1.0 if k >= n else float(beta.ppf(1 - alpha / 2, k + 1, n - k))
    return (lo, hi)


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


def _iid_variance_of_mean(values: Sequence[float], mean: float) -> float:
    n = len(values)
    return math.fsum((v - mean) ** 2 for v in values) / (n - 1) / n


def _clustered_variance_of_mean(values: Sequence[float], mean: float,
                                clusters: Sequence[Hashable]) -> tuple[float, int]:
    """CR1 variance of the mean (as statsmodels' cluster covariance) and the number of clusters."""
    if len(clusters) != len(values):
        raise ValueError("clusters must give one label per value")
    sums: dict[Hashable, float] = {}
    for v, g in zip(values, clusters):
        sums[g] = sums.get(g, 0.0) + (v - mean)
    g_count = len(sums)
    n = len(values)
    if g_count < 2:
        return (math.nan, g_count)
    var = g_count / (g_count - 1) * math.fsum(s * s for s in sums.values()) / (n * n)
    return (var, g_count)


def t_interval(values: Sequence[float], level: float = DEFAULT_LEVEL,
               clusters: Sequence[Hashable] | None = None) -> Interval:
    """Student-t interval for the mean of per-question values; no bounds (NaN) where there is
    no spread to estimate one from: one value, one cluster, or every value the same (a
    zero-width interval would claim a certainty that a sample without spread cannot give)."""
    from scipy.stats import t  # lazy: scipy.stats loads in 2.5 s

    check_level(level)
    n = len(values)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, "student-t", level)
    mean = _mean(values)
    if clusters is None:
        method = "student-t"
        if n < 2:
            return Interval(mean, math.nan, math.nan, method, level)
        var, df = _iid_variance_of_mean(values, mean), n - 1
    else:
        method = "student-t-clustered"
        var, g_count = _clustered_variance_of_mean(values, mean, clusters)
        df = g_count - 1
        if df < 1:
            return Interval(mean, math.nan, math.nan, method, level)
    if not var > 0:  # no spread (or NaN): nothing to scale the t quantile by
        return Interval(mean, math.nan, math.nan, method, level)
    half = float(t.ppf(0.5 + level / 2, df)) * math.sqrt(var)
    return Interval(mean, mean - half, mean + half, method, level)


def binomial_interval(hits: Sequence[float], level: float = DEFAULT_LEVEL,
                      clusters: Sequence[Hashable] | None = None) -> Interval:
    """Clopper-Pearson interval for a proportion of 0/1 hits (Korn-Graubard when clustered)."""
    from scipy.stats import t  # lazy: scipy.stats loads in 2.5 s

    check_level(level)
    n = len(hits)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, "clopper-pearson", level)
    k = math.fsum(hits)
    p = k / n
    if clusters is None:
        lo, hi = clopper_pearson(k, n, level)
        return Interval(p, lo, hi, "clopper-pearson", level)
    method = "clopper-pearson-korn-graubard"
    var_c, g_count = _clustered_variance_of_mean(hits, p, clusters)
    if g_count < 2:  # one cluster: no spread between clusters to estimate, as in t_interval
        return Interval(p, math.nan, math.nan, method, level)
    n_eff = float(n)  # at p of 0 or 1 no design effect can be estimated: it is taken as 1
    if 0.0 < p < 1.0:
        var_iid = p * (1 - p) / (n - 1)
        deff = var_c / var_iid
        if deff > 0:
            n_eff = min(float(n), n / deff)
    # the degrees-of-freedom adjustment holds at every p, so the interval does not narrow at
    # the edge: none right of 500 in 5 clusters is [0, 1.46]%, not the iid [0, 0.74]%
    q = 0.5 + level / 2
    n_eff *= (float(t.ppf(q, n - 1)) / float(t.ppf(q, g_count - 1))) ** 2
    lo, hi = clopper_pearson(p * n_eff, n_eff, level)
    return Interval(p, lo, hi, method, level)
