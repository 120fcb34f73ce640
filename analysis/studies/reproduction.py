"""The SQuADShifts study reproduced from data: every fit its figures print and every
average drop its text states, beside ours and the difference (`qashift reproduce`)."""

from __future__ import annotations

import pandas as pd

from analysis.sources import paper
from analysis.sources.tidy import paired
from analysis.stats import fits

FIT_COLUMNS = ["figure", "testset", "metric", "scale", "n_models", "slope_published",
               "slope", "slope_diff", "r2_published", "r2", "r2_diff", "note"]
DROP_COLUMNS = ["where", "kind", "testset", "metric", "n", "drop_published", "drop",
                "drop_diff"]


def fit_comparison(df: pd.DataFrame) -> pd.DataFrame:
    """One row per published fit: the caption's slope and R², ours over the same panel."""
    rows = []
    for p in paper.published_fits().to_dict("records"):
        row = {**p, "slope_published": p["slope"], "r2_published": p["r2"], "note": ""}
        try:
            f = fits.fit_panel(df, p["testset"], p["metric"], p["scale"], n_boot=0)
        except ValueError:
            rows.append({**row, "n_models": 0, "slope": None, "r2": None, "slope_diff": None,
                         "r2_diff": None, "note": "no published per-model data for this panel"})
            continue
        row.update(n_models=f.n_models, slope=f.slope, r2=f.r2,
                   slope_diff=f.slope - p["slope"], r2_diff=f.r2 - p["r2"])
        if p["testset"] == paper.TABLES[2].testset:
            own = table_only_fit(paper.TABLES[2], p["scale"])
            row["note"] = (f"{paper.TABLES[2].label} alone ({own.n_models} rows, its own "
                           f"original column) gives slope {own.slope:.2f}, R² {own.r2:.2f}")
        rows.append(row)
    return pd.DataFrame(rows, columns=FIT_COLUMNS)


def table_only_fit(t: paper.Table, scale: str = "linear") -> fits.Fit:
    """The fit of a table's `new` column on its own `squad` column, models only."""
    rows = paper.read(t)
    rows = rows[~rows["name"].str.fullmatch(r"Human-\d+")]
    return fits.fit_xy(rows["squad"], rows["new"], scale, testset=t.testset, metric=t.metric,
                       n_boot=0)


def drop_comparison(df: pd.DataFrame) -> pd.DataFrame:
    """Mean of original minus new score over the models (or humans) of each stated drop."""
    rows = []
    for p in paper.published_drops().to_dict("records"):
        pairs = paired(df, p["testset"], p["metric"])
        pairs = pairs[pairs["kind"] == p["kind"]]
        drop = float((pairs["x"] - pairs["y"]).mean()) if len(pairs) else None
        rows.append({**p, "n": len(pairs), "drop_published": p["drop"], "drop": drop,
                     "drop_diff": None if drop is None else drop - p["drop"]})
    return pd.DataFrame(rows, columns=DROP_COLUMNS)
