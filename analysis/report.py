"""Regenerate every figure and table of the analysis from one tidy frame, in one call.

Output folder layout (``stem`` = PNG, PDF and SVG):

* ``{testset}-{metric}``: linear and probit panels side by side, one per new set and metric;
* ``grid-{metric}-{scale}``: all new sets in one figure;
* ``concurrence-{metric}``: Kendall tau-b heat map;
* ``fits.csv``, ``effective_robustness.csv``, ``gaps.csv``, ``gaps_mean.csv``,
  ``rank_changes.csv``, ``concurrence.csv``; ``coverage.txt`` when the tidy frame carries a
  reconciliation report (published SQuADShifts data).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from analysis import concurrence, figures, fits, gaps
from analysis.tidy import METRICS, new_testsets, paired


def regenerate(df: pd.DataFrame, out: Path | str, n_boot: int = fits.DEFAULT_BOOT,
               seed: int = fits.DEFAULT_SEED, metrics: Sequence[str] | None = None
               ) -> list[Path]:
    """Write all figures and tables for df under out; return the paths written. `metrics`
    defaults to every metric the frame has data for."""
    metrics = tuple(metrics or [m for m in METRICS if (df["metric"] == m).any()])
    out = Path(out)
    written: list[Path] = []
    all_fits = fits.fit_all(df, metrics=metrics, n_boot=n_boot, seed=seed)
    by_key = {(f.testset, f.metric, f.scale): f for f in all_fits}
    testsets = new_testsets(df)
    if not testsets:
        raise ValueError("nothing to plot: no test set in these results has scores for models "
                         "that also have a reference (original) score; evaluate the same "
                         "bundles on a shifted set and on its reference set")
    out.mkdir(parents=True, exist_ok=True)
    # a (set, metric) without paired scores is not drawn: AddOneSent's table has EM only
    present = {(t, m) for t in testsets for m in metrics if not paired(df, t, m).empty}
    for t in testsets:
        for m in metrics:
            if (t, m) not in present:
                continue
            panels = [(t, m, s) for s in fits.SCALES]
            fig = figures.panel_grid(df, panels, by_key, ncols=2)
            written += figures.save(fig, out / f"{t}-{m}")
    for m in metrics:
        for s in fits.SCALES:
            fig = figures.panel_grid(df, [(t, m, s) for t in testsets if (t, m) in present],
                                     by_key, ncols=2)
            written += figures.save(fig, out / f"grid-{m}-{s}")
    tables = {"fits": fits.fit_table(all_fits),
              "effective_robustness": fits.effective_robustness(df, all_fits)}
    per_model = pd.concat([g for g in (gaps.gaps(df, m) for m in metrics) if len(g)]
                          or [gaps.gaps(df, metrics[0])], ignore_index=True)
    tables["gaps"] = per_model
    tables["gaps_mean"] = gaps.average_gaps(per_model) if len(per_model) else per_model
    changes = [gaps.rank_changes(df, t, m) for t in testsets for m in metrics]
    tables["rank_changes"] = pd.concat([c for c in changes if len(c)] or changes[:1],
                                       ignore_index=True)
    conc = pd.concat([concurrence.concurrence(df, m, n_boot=n_boot, seed=seed)
                      for m in metrics], ignore_index=True)
    tables["concurrence"] = conc
    for m in metrics:
        pairs = conc[conc["metric"] == m]
        if len(pairs):
            fig = figures.concurrence_heatmap(
                concurrence.as_matrix(pairs),
                f"Concurrence ({figures.METRIC_LABEL[m]}, {pairs['n_models'].iat[0]} models)")
            written += figures.save(fig, out / f"concurrence-{m}")
    for name, table in tables.items():
        path = out / f"{name}.csv"
        table.to_csv(path, index=False, float_format="%.6g")
        written.append(path)
    if df.attrs.get("coverage"):
        path = out / "coverage.txt"
        path.write_text(df.attrs["coverage"], encoding="utf-8")
        written.append(path)
    return written
