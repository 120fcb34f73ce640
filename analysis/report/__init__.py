"""Regenerate every figure and table of the analysis from one tidy frame, in one call.

Output folder layout (``stem`` = PNG, PDF and SVG):

* ``{testset}-{metric}``: linear and probit panels side by side, one per new set and metric;
* ``grid-{metric}-{scale}``: all new sets in one figure;
* ``concurrence-{metric}``: Kendall tau-b heat map;
* ``fits.csv``, ``effective_robustness.csv``, ``gaps.csv``, ``gaps_mean.csv``,
  ``rank_changes.csv``, ``concurrence.csv``; ``coverage.txt`` when the tidy frame carries a
  reconciliation report (published SQuADShifts data). The tables may go to a folder of their
  own (the site's ``data/``).

``write`` also hands back every table as its file holds it (six significant digits, read
back as a reader of the CSV would), so the site renders the numbers it publishes without
reading the files again. ``comparisons`` draws two sources' trends side by side.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis import figures
from analysis.sources.tidy import METRICS, NO_PAIRS, new_testsets, paired
from analysis.stats import concurrence, fits, gaps
from evaluator.core.files import READABLE, write_atomic

FLOAT_FORMAT = "%.6g"  # the precision of every published table


@dataclass(frozen=True)
class Report:
    """What `write` made: the files, and each table (by name) as its CSV file holds it."""

    written: list[Path]
    tables: dict[str, pd.DataFrame]


def regenerate(df: pd.DataFrame, out: Path | str, n_boot: int = fits.DEFAULT_BOOT,
               seed: int = fits.DEFAULT_SEED, metrics: Sequence[str] | None = None
               ) -> list[Path]:
    """Write all figures and tables for df under out; return the paths written. `metrics`
    defaults to every metric the frame has data for."""
    return write(df, out, n_boot=n_boot, seed=seed, metrics=metrics).written


def write(df: pd.DataFrame, out: Path | str, tables_dir: Path | str | None = None, *,
          n_boot: int = fits.DEFAULT_BOOT, seed: int = fits.DEFAULT_SEED,
          metrics: Sequence[str] | None = None) -> Report:
    """`regenerate`, with the tables (and coverage.txt) in `tables_dir` (default: out) and
    handed back as published."""
    metrics = tuple(metrics or [m for m in METRICS if (df["metric"] == m).any()])
    out = Path(out)
    tables_dir = out if tables_dir is None else Path(tables_dir)
    written: list[Path] = []
    all_fits = fits.fit_all(df, metrics=metrics, n_boot=n_boot, seed=seed)
    by_key = {(f.testset, f.metric, f.scale): f for f in all_fits}
    testsets = new_testsets(df)
    if not testsets:
        raise ValueError(f"nothing to plot: {NO_PAIRS}")
    out.mkdir(parents=True, exist_ok=True)
    # a (set, metric) without paired scores is not drawn: AddOneSent's table has EM only
    present = {(t, m) for t in testsets for m in metrics if not paired(df, t, m).empty}
    for t in testsets:
        for m in metrics:
            if (t, m) not in present:
                continue
            panels = [(t, m, s) for s in fits.SCALES]
            written += figures.save_grid(df, panels, by_key, out / f"{t}-{m}")
    for m in metrics:
        for s in fits.SCALES:
            grid = [(t, m, s) for t in testsets if (t, m) in present]
            if not grid:
                continue  # no set has this metric on both axes
            written += figures.save_grid(df, grid, by_key, out / f"grid-{m}-{s}")
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
            written += figures.save_heatmap(
                concurrence.as_matrix(pairs),
                f"Concurrence ({figures.METRIC_LABEL[m]}, {pairs['n_models'].iat[0]} models)",
                out / f"concurrence-{m}")
    tables_dir.mkdir(parents=True, exist_ok=True)
    published = {}
    for name, table in tables.items():
        path = tables_dir / f"{name}.csv"
        text = table.to_csv(index=False, float_format=FLOAT_FORMAT)
        write_atomic(path, text.encode("utf-8"), READABLE)
        written.append(path)
        published[name] = _read_back(text)
    if df.attrs.get("coverage"):
        path = tables_dir / "coverage.txt"
        write_atomic(path, df.attrs["coverage"].encode("utf-8"), READABLE)
        written.append(path)
    return Report(written, published)


def _read_back(text: str) -> pd.DataFrame:
    """A table as a reader of its CSV text gets it (an empty file: an empty frame)."""
    return pd.read_csv(io.StringIO(text)) if len(text) > 1 else pd.DataFrame()


def comparisons(df: pd.DataFrame, name: str, other: pd.DataFrame, other_name: str,
                out: Path | str, n_boot: int = fits.DEFAULT_BOOT, seed: int = fits.DEFAULT_SEED
                ) -> tuple[list[Path], list[str]]:
    """compare-<set>-<metric> figures of two sources (both trends side by side) for every new
    set both have; returns the files written and the "<set> <metric>" panels skipped because
    one source has fewer than 3 models with both scores there."""
    common = [t for t in new_testsets(df) if t in set(new_testsets(other))]
    if not common:
        raise ValueError(f"{name!r} and {other_name!r} share no compared test set")
    written: list[Path] = []
    skipped = []
    for testset in common:
        for metric in METRICS:
            try:
                fig = figures.comparison_row([(name, df), (other_name, other)],
                                             testset, metric, "linear", n_boot, seed)
            except ValueError:  # one side has fewer than 3 models with both scores
                skipped.append(f"{testset} {metric}")
                continue
            written += figures.save(fig, Path(out) / f"compare-{testset}-{metric}")
    return written, skipped
