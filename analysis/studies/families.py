"""Families of systems against one trend (Awadalla et al. 2022, section 4): fine-tuned,
few-shot fine-tuned, in-context learning and zero-shot systems, and the own population beside
them.

The baseline is the probit-scale OLS trend of new-set F1 on original F1 over one family (by
default the fully fine-tuned one, as in their figures); every other system's effective
robustness is its distance above that trend, in F1 points, and a family's is the mean over
its systems with a Student-t 95% interval over systems (systems, not questions, are the
sample here). The figure puts each published panel beside the own population's panel of the
same shift, each with its own trend."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats

from analysis import figures
from analysis.sources.tidy import paired
from analysis.stats.fits import fit_xy

BASELINE = "fine-tuned"
SHIFTS = (("new-wiki", "new-wiki-test"), ("reddit", "reddit-test"), ("amazon", "amazon-test"))


def family_robustness(df: pd.DataFrame, testsets: Sequence[str], baseline: str = BASELINE,
                      scale: str = "probit", metric: str = "f1") -> pd.DataFrame:
    """Per test set and family: systems, mean effective robustness against the baseline
    family's trend, its 95% t-interval over systems, and the share above the trend."""
    rows = []
    for testset in testsets:
        pairs = paired(df, testset, metric)
        pairs = pairs[pairs["kind"] == "model"]
        base = pairs[pairs["family"] == baseline]
        if len(base) < 3:
            raise ValueError(f"{testset}: the baseline family {baseline!r} has {len(base)} "
                             f"systems with both scores; at least 3 are needed for a trend")
        trend = fit_xy(base["x"], base["y"], scale, testset=testset, metric=metric, n_boot=0)
        er = pairs["y"].to_numpy() - trend.predict(pairs["x"].to_numpy())
        for family, part in pd.Series(er, index=pairs.index).groupby(pairs["family"]):
            values = part.to_numpy()
            mean = float(values.mean())
            half = float(stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) /
                         np.sqrt(len(values))) if len(values) > 1 else float("nan")
            rows.append({"testset": testset, "family": family, "systems": len(values),
                         "mean_er": mean, "er_lo": mean - half, "er_hi": mean + half,
                         "above": float((values > 0).mean()), "baseline": baseline,
                         "scale": scale, "trend_slope": trend.slope})
    return pd.DataFrame(rows)


def combined(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The family tables of several sources as one, each row naming its source."""
    return pd.concat([t.assign(source=name) for name, t in tables.items()], ignore_index=True)


def beside(published: pd.DataFrame, own: pd.DataFrame, name: str, own_name: str,
           shifts: Sequence[tuple[str, str]] = SHIFTS, n_boot: int = 200, seed: int = 0):
    """(set, figure) per shift: the published families' panel beside the own population's
    (each on its own sets: the full shifted sets against SQuAD dev there, the test halves
    against the held-out half of SQuAD dev here)."""
    return [(theirs, figures.comparison_row([(name, published, theirs), (own_name, own, ours)],
                                            None, "f1", "probit", n_boot, seed))
            for theirs, ours in shifts]
