"""Figures: one parameterised scatter panel, grids built from it, a concurrence heat map,
the strata's bars and panels and the approach-level knee and tau figures. They draw what
``analysis.stats`` computed from ``analysis.sources``' frames; the layers above (report,
studies) choose what to draw and where it goes.

Everything renders with the Agg backend and is saved without dates or random ids
(``svg.hashsalt`` fixed, no CreationDate/Date metadata), so the same input gives
byte-identical PNG, PDF and SVG files, each written whole through `write_atomic` (a link
at a figure's path is replaced, never followed). Because of that, a grid or heat map drawn
once is kept in the cache (`<cache>/figures/`) under the digest of what it shows and of the
code and library that draw it (`kept`): a report of a table that changed in one set redraws
that set's figures and the grids that hold it, and copies the rest.
"""

from __future__ import annotations

import io
import os
import textwrap
from collections.abc import Callable, Sequence
from functools import cache, partial
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.layout_engine import TightLayoutEngine  # noqa: E402

from analysis.sources import facts  # noqa: E402
from analysis.sources.tidy import paired  # noqa: E402
from analysis.stats import fits as fits_module  # noqa: E402
from analysis.stats.fits import Fit, fit_panel, to_scale  # noqa: E402
from evaluator.core import settings  # noqa: E402
from evaluator.core.files import READABLE, remove_tree, write_atomic  # noqa: E402
from evaluator.core.hashing import canonical_json, sha256_bytes  # noqa: E402

FORMATS = ("png", "pdf", "svg")
METRIC_LABEL = {"em": "EM", "f1": "F1"}
PROBIT_TICKS = (1, 2, 5, 10, 20, 30, 40, 50, 60, 70, 80, 90, 95, 98, 99, 99.5, 99.9)
STYLE = {"svg.hashsalt": "qashift", "svg.fonttype": "none", "pdf.compression": 6,
         "figure.dpi": 100, "savefig.dpi": 150, "font.size": 9}
MODEL_COLOR, HUMAN_COLOR, FIT_COLOR = "#1f77b4", "#d62728", "#2c3e50"
FAMILY_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#17becf", "#bcbd22")
SMALL_SET = 500  # questions: below, a panel says its intervals are wide
# the columns of `tidy.paired` that `scatter_panel` draws from
PANEL_COLUMNS = ("kind", "family", "x", "x_lo", "x_hi", "x_testset", "y", "y_lo", "y_hi")
TITLE_WIDTH = 52  # characters per title line


def tight(fig) -> None:
    """`fig.tight_layout()`, without leaving the placeholder layout engine behind that makes
    every savefig draw the whole figure once more before drawing it (a third of the time of
    writing a figure in three formats)."""
    TightLayoutEngine().execute(fig)


def _label(testset: str) -> str:
    return facts.label(testset)


def scatter_panel(ax, df: pd.DataFrame, testset: str, metric: str, scale: str = "linear",
                  fit: Fit | None = None, title: str | None = None) -> None:
    """New-set score against original score for one (testset, metric, scale).

    Models as dots and humans as stars, 95% interval bars where known (none for F1 from
    published totals), y = x dashed, the OLS trend and its bootstrap band. On probit axes
    positions are probit-transformed but ticks read in raw score.
    """
    pairs = paired(df, testset, metric)
    tr = (lambda v: to_scale(v, scale))  # noqa: E731
    values = pairs[["x", "y", "x_lo", "x_hi", "y_lo", "y_hi"]].to_numpy(float).ravel() \
        if len(pairs) else np.array([50.0, 90.0])
    values = values[np.isfinite(values)]  # the axes hold every point and every interval
    lo, hi = max(np.nanmin(values) - 3, 0.5), min(np.nanmax(values) + 3, 99.5)
    ax.plot(tr([lo, hi]), tr([lo, hi]), ls="--", color="0.5", lw=1, label="y = x")
    if fit is not None:
        ax.fill_between(tr(fit.grid), tr(fit.band_lo), tr(fit.band_hi), color=FIT_COLOR,
                        alpha=0.18, lw=0, label=f"bootstrap 95% band ({fit.n_boot})")
        ax.plot(tr(fit.grid), tr(fit.line), color=FIT_COLOR, lw=1.5,
                label=f"{scale} fit: slope {fit.slope:.2f}, R² {fit.r2:.2f}")
    models = pairs[pairs["kind"] == "model"] if len(pairs) else pairs
    humans = pairs[pairs["kind"] == "human"] if len(pairs) else pairs
    groups = [(*g, "o", 14) for g in _model_groups(models)]
    if not humans.empty:
        groups.append((f"humans ({len(humans)})", humans, HUMAN_COLOR, "*", 90))
    barred = False
    for label, sub, color, marker, size in groups:
        x, y = sub["x"].to_numpy(), sub["y"].to_numpy()
        for axis in ("x", "y"):
            drawn = _bars(ax, tr, x, y, sub[f"{axis}_lo"].to_numpy(),
                          sub[f"{axis}_hi"].to_numpy(), axis, color,
                          None if barred else "95% intervals")
            barred = barred or drawn
        ax.scatter(tr(x), tr(y), s=size, marker=marker, color=color, zorder=3,
                   edgecolor="white" if marker == "o" else "black", linewidth=0.4,
                   label=label)
    ax.set_xlim(tr(lo), tr(hi))
    ax.set_ylim(tr(lo), tr(hi))
    if scale == "probit":
        ticks = [t for t in PROBIT_TICKS if lo <= t <= hi]
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_ticks(tr(ticks), labels=[f"{t:g}" for t in ticks])
    ref = sorted(set(pairs["x_testset"])) if len(pairs) else []
    ax.set_xlabel(f"{METRIC_LABEL[metric]} on {' / '.join(_label(r) for r in ref) or 'original'}")
    ax.set_ylabel(f"{METRIC_LABEL[metric]} on {_label(testset)}")
    title = title or f"{_label(testset)}, {METRIC_LABEL[metric]} ({scale} axes)"
    ax.set_title("\n".join(textwrap.fill(line, TITLE_WIDTH) for line in title.split("\n")))
    ax.grid(True, lw=0.3, color="0.85")
    ax.set_aspect("equal", adjustable="box")
    notes = []
    if metric == "f1" and not pairs["y_lo"].notna().any():
        notes.append("no intervals: published F1 totals only")
    questions = facts.size(testset)
    if questions is not None and questions < SMALL_SET:
        notes.append(f"{questions:,} questions: wide intervals")
    if notes:
        ax.text(0.98, 0.02, "\n".join(notes), transform=ax.transAxes, ha="right",
                va="bottom", fontsize=7, color="0.35")
    ax.legend(loc="upper left", fontsize=7, frameon=False)


def _model_groups(models: pd.DataFrame) -> list[tuple[str, pd.DataFrame, str]]:
    """(legend label, rows, colour): the models by family where the table names two or more
    families, each in its own colour; else all of them in one."""
    family = models["family"].fillna("").astype(str) if "family" in models else None
    names = sorted(set(family) - {""}) if family is not None else []
    if len(names) < 2:
        return [(f"models ({len(models)})", models, MODEL_COLOR)]
    if (family == "").any():
        names.append("")
    return [(f"{name or 'no family'} ({int((family == name).sum())})", models[family == name],
             FAMILY_COLORS[i % len(FAMILY_COLORS)]) for i, name in enumerate(names)]


def _bars(ax, tr, x, y, lo, hi, axis: str, color: str, label: str | None = None) -> bool:
    """Interval bars (transformed to the axis scale) for points whose interval is known;
    whether any were drawn (`label` names them in the legend)."""
    known = np.isfinite(lo.astype(float)) & np.isfinite(hi.astype(float))
    if not known.any():
        return False
    x, y, lo, hi = x[known], y[known], lo[known], hi[known]
    centre = x if axis == "x" else y
    err = np.vstack([tr(centre) - tr(lo), tr(hi) - tr(centre)])
    kw = {"xerr": err} if axis == "x" else {"yerr": err}
    ax.errorbar(tr(x), tr(y), fmt="none", ecolor=color, alpha=0.35, lw=0.7, label=label, **kw)
    return True


def panel_grid(df: pd.DataFrame, panels: Sequence[tuple[str, str, str]],
               fits: dict | None = None, ncols: int = 2, panel_size: float = 4.2):
    """A figure of scatter panels, one per (testset, metric, scale)."""
    with plt.rc_context(STYLE):
        nrows = int(np.ceil(len(panels) / ncols))
        fig, axes = plt.subplots(nrows, ncols, figsize=(panel_size * ncols, panel_size * nrows),
                                 squeeze=False)
        for ax, key in zip(axes.flat, panels):
            scatter_panel(ax, df, *key, fit=(fits or {}).get(key))
        for ax in axes.flat[len(panels):]:
            ax.set_visible(False)
        tight(fig)
    return fig


def comparison_row(sources: Sequence[tuple], testset: str | None, metric: str,
                   scale: str, n_boot: int, seed: int, panel_size: float = 4.2):
    """One panel per named source, (name, frame) on `testset` or (name, frame, its own name
    of the set): e.g. our own systems' trend next to the published models' trend. Each panel
    has its own reference set and its own fit."""
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, len(sources), figsize=(panel_size * len(sources),
                                                           panel_size), squeeze=False)
        for ax, (name, df, *own) in zip(axes.flat, sources):
            shown = own[0] if own else testset
            try:
                fit = fit_panel(df, shown, metric, scale, n_boot=n_boot, seed=seed)
            except ValueError:
                plt.close(fig)
                raise
            scatter_panel(ax, df, shown, metric, scale, fit=fit,
                          title=f"{name}\n{_label(shown)}, {METRIC_LABEL[metric]} ({scale})")
        tight(fig)
    return fig


def concurrence_heatmap(matrix: pd.DataFrame, title: str, stat_label: str = "Kendall τ-b"):
    """Heat map of a symmetric test-set matrix with the value printed in each cell."""
    with plt.rc_context(STYLE):
        k = len(matrix)
        fig, ax = plt.subplots(figsize=(1.1 * k + 2.2, 1.1 * k + 1.2))
        im = ax.imshow(matrix.to_numpy(), vmin=-1, vmax=1, cmap="RdBu_r")
        labels = [_label(c) for c in matrix.columns]
        ax.set_xticks(range(k), labels=labels, rotation=35, ha="right")
        ax.set_yticks(range(k), labels=labels)
        for i in range(k):
            for j in range(k):
                v = matrix.iat[i, j]
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=8,
                        color="white" if abs(v) > 0.6 else "black")
        fig.colorbar(im, ax=ax, label=stat_label, shrink=0.8)
        ax.set_title(title)
        tight(fig)
    return fig


def score_heatmap(scores: pd.DataFrame, title: str, label: str = "score"):
    """Heat map of a rows x columns score table (approaches x benchmarks), each column
    coloured on its own range (benchmarks differ in difficulty: the ranking inside a column
    is what concurrence compares), the score printed in each cell, blank where missing."""
    with plt.rc_context(STYLE):
        values = scores.to_numpy(dtype=float)
        lo, hi = np.nanmin(values, axis=0), np.nanmax(values, axis=0)
        within = (values - lo) / np.where(hi > lo, hi - lo, 1.0)
        rows, cols = values.shape
        fig, ax = plt.subplots(figsize=(0.55 * cols + 3.0, 0.38 * rows + 1.8))
        im = ax.imshow(np.ma.masked_invalid(within), vmin=0, vmax=1, cmap="viridis",
                       aspect="auto")
        ax.set_xticks(range(cols), labels=list(scores.columns), rotation=60, ha="right")
        ax.set_yticks(range(rows), labels=list(scores.index))
        for i in range(rows):
            for j in range(cols):
                if np.isfinite(values[i, j]):
                    ax.text(j, i, f"{values[i, j]:.0f}", ha="center", va="center",
                            fontsize=6, color="white" if within[i, j] < 0.5 else "black")
        fig.colorbar(im, ax=ax, label=f"{label}, from the column's lowest (0) to highest (1)",
                     shrink=0.8)
        ax.set_title(title)
        tight(fig)
    return fig


def share_bars(shares: pd.DataFrame, title: str, order: Sequence[str] | None = None):
    """Grouped bars: the share of questions per stratum (x) for each test set (colour), as
    the study's answer-type and divergence histograms (Figures 5 and 6)."""
    testsets = list(dict.fromkeys(shares["testset"]))
    strata = list(order or sorted(set(shares["stratum"]), key=_stratum_key))
    strata = [k for k in strata if k in set(shares["stratum"])]
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(max(6.0, 0.75 * len(strata) * max(1, len(testsets))
                                            / 2.5), 4.0))
        width = 0.8 / max(1, len(testsets))
        for i, t in enumerate(testsets):
            sub = shares[shares["testset"] == t].set_index("stratum")["share"]
            ax.bar(np.arange(len(strata)) + (i - (len(testsets) - 1) / 2) * width,
                   [100 * sub.get(k, 0.0) for k in strata], width, label=_label(t))
        ax.set_xticks(range(len(strata)), labels=strata, rotation=30, ha="right")
        ax.set_ylabel("share of questions (%)")
        ax.set_title(title)
        ax.grid(True, axis="y", lw=0.3, color="0.85")
        ax.legend(fontsize=7, frameon=False)
        tight(fig)
    return fig


def _stratum_key(k: str):
    digits = "".join(c for c in k if c.isdigit() or c == ".")
    try:
        return (0, float(digits.split("-")[0] or "nan"), k)
    except ValueError:
        return (1, 0.0, k)


def xy_by_testset(points: pd.DataFrame, xlabel: str, ylabel: str, title: str,
                  hue: str | None = None, panel_size: float = 4.0):
    """One panel per test set of points (x, y) with y = x dashed; `hue` colours groups.
    Used for predicted vs observed F1 (Figures 15, 16) and per-stratum F1 (Figure 14)."""
    testsets = list(dict.fromkeys(points["testset"]))
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, max(1, len(testsets)),
                                 figsize=(panel_size * max(1, len(testsets)), panel_size),
                                 squeeze=False)
        for ax, t in zip(axes.flat, testsets):
            sub = points[points["testset"] == t]
            lo = max(0.0, float(np.nanmin(sub[["x", "y"]].to_numpy())) - 3)
            hi = min(100.0, float(np.nanmax(sub[["x", "y"]].to_numpy())) + 3)
            ax.plot([lo, hi], [lo, hi], ls="--", color="0.5", lw=1, label="y = x")
            groups = sub.groupby(hue, sort=True) if hue else [("", sub)]
            for name, g in groups:
                ax.scatter(g["x"], g["y"], s=18, zorder=3, edgecolor="white", linewidth=0.4,
                           label=str(name) if hue else f"systems ({len(g)})")
            ax.set_xlim(lo, hi)
            ax.set_ylim(lo, hi)
            ax.set_aspect("equal", adjustable="box")
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel.format(testset=_label(t)))
            ax.set_title(_label(t))
            ax.grid(True, lw=0.3, color="0.85")
            ax.legend(fontsize=7, frameon=False, loc="upper left")
        fig.suptitle(title)
        tight(fig)
    return fig


GROUP_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd")


def knee_grid(scores: pd.DataFrame, groups: pd.Series, reference: str,
              benchmarks: Sequence[str], knees: dict[str, dict], ncols: int = 4,
              panel_size: float = 3.3):
    """One panel per benchmark: each approach's score against its score on `reference`,
    coloured by group, with the least-squares line overall (solid) and per group (dashed)
    and the approaches furthest from the overall line named (Liu et al.'s "knee" reading)."""
    names = list(dict.fromkeys(groups))
    with plt.rc_context(STYLE):
        nrows = int(np.ceil(len(benchmarks) / ncols))
        fig, axes = plt.subplots(nrows, ncols, figsize=(panel_size * ncols, panel_size * nrows),
                                 squeeze=False)
        for ax, b in zip(axes.flat, benchmarks):
            both = scores[[reference, b]].dropna()
            for color, g in zip(GROUP_COLORS, names):
                sub = both[groups.reindex(both.index) == g]
                ax.scatter(sub[reference], sub[b], s=16, color=color, zorder=3,
                           edgecolor="white", linewidth=0.4, label=f"{g} ({len(sub)})")
            found = knees[b]
            xs = np.array([both[reference].min(), both[reference].max()])
            for name, line in found["lines"].items():
                color = FIT_COLOR if name == "all" else GROUP_COLORS[names.index(name)]
                ax.plot(xs, line["intercept"] + line["slope"] * xs, color=color, lw=1,
                        ls="-" if name == "all" else "--")
            for approach, residual in found["largest_residuals"]:
                ax.annotate(f"{approach} ({residual:+.1f})",
                            (both.at[approach, reference], both.at[approach, b]),
                            fontsize=6, xytext=(3, 3), textcoords="offset points")
            for limits, values in ((ax.set_xlim, both[reference]), (ax.set_ylim, both[b])):
                pad = max(1.0, 0.06 * float(values.max() - values.min()))
                limits(float(values.min()) - pad, float(values.max()) + pad)
            ax.set_title(b, fontsize=8)
            ax.set_xlabel(reference, fontsize=7)
            ax.set_ylabel("EM", fontsize=7)
            ax.grid(True, lw=0.3, color="0.85")
        for ax in axes.flat[len(benchmarks):]:
            ax.set_visible(False)
        if len(benchmarks):
            axes.flat[0].legend(fontsize=6, frameon=False, loc="upper left")
        tight(fig)
    return fig


def tau_dots(rows: pd.DataFrame, columns: dict[str, str], threshold: float, title: str):
    """Kendall tau per benchmark (one row each, `benchmark` column) as dots, one series per
    entry of `columns` (column -> legend label), with the concurrence threshold dashed; an
    undefined tau is left out."""
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(6.5, 0.22 * len(rows) + 1.4))
        y = np.arange(len(rows))[::-1]
        for (column, label), color, marker in zip(columns.items(), GROUP_COLORS, "osD^"):
            values = pd.to_numeric(rows[column], errors="coerce").to_numpy(float)
            ax.scatter(values, y, s=18, color=color, marker=marker, label=label, zorder=3)
        ax.axvline(threshold, ls="--", color="0.5", lw=1, label=f"threshold {threshold:g}")
        ax.axvline(0, color="0.7", lw=0.6)
        ax.set_yticks(y, labels=list(rows["benchmark"]), fontsize=7)
        ax.set_xlim(-1.05, 1.05)
        ax.set_xlabel("Kendall τ with the reference")
        ax.set_title(title)
        ax.grid(True, axis="x", lw=0.3, color="0.85")
        ax.legend(fontsize=7, frameon=False, loc="lower left")
        tight(fig)
    return fig


def save(fig, stem: Path | str, formats: Sequence[str] = FORMATS) -> list[Path]:
    """Write fig as stem.png/.pdf/.svg without timestamps, then close it."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    meta = {"png": {"Software": None}, "pdf": {"CreationDate": None, "ModDate": None,
                                               "Producer": None},
            "svg": {"Date": None}}
    out = []
    with plt.rc_context(STYLE):
        for fmt in formats:
            path = stem.with_suffix(f".{fmt}")
            buffer = io.BytesIO()  # savefig opens a path as it finds it: a link is followed
            fig.savefig(buffer, format=fmt, metadata=meta[fmt])
            write_atomic(path, buffer.getvalue(), READABLE)
            out.append(path)
    plt.close(fig)
    return out


def save_grid(df: pd.DataFrame, panels: Sequence[tuple[str, str, str]], fits: dict | None,
              stem: Path | str, ncols: int = 2) -> list[Path]:
    """`save(panel_grid(...), stem)`, or the files of the same grid kept from before."""
    shown = {"panels": [_panel_shown(df, *key, (fits or {}).get(key)) for key in panels],
             "ncols": ncols}
    return kept(stem, shown, partial(panel_grid, df, panels, fits, ncols=ncols))


def save_heatmap(matrix: pd.DataFrame, title: str, stem: Path | str) -> list[Path]:
    """`save(concurrence_heatmap(matrix, title), stem)`, or the files kept from before."""
    shown = {"heatmap": matrix.to_csv(), "title": title,
             "labels": [_label(c) for c in matrix.columns]}
    return kept(stem, shown, partial(concurrence_heatmap, matrix, title))


def kept(stem: Path | str, shown: dict, draw: Callable[[], plt.Figure],
         formats: Sequence[str] = FORMATS) -> list[Path]:
    """Save the figure `draw()` makes as stem.png/.pdf/.svg, unless a figure of the same
    `shown` (everything it shows that is not code: data, fits, labels) was drawn by the same
    code and matplotlib before: then its files, kept in the cache, are copied."""
    key = sha256_bytes(canonical_json({"shown": shown, "formats": list(formats),
                                       "code": _drawing_code()}))
    folder = settings.cache_dir() / "figures" / key
    stem = Path(stem)
    paths = [stem.with_suffix(f".{fmt}") for fmt in formats]
    try:
        files = [(folder / f"figure.{fmt}").read_bytes() for fmt in formats]
    except OSError:  # not kept (or only partly: a folder is complete once it has its name)
        files = None
    if files is not None:
        stem.parent.mkdir(parents=True, exist_ok=True)
        for data, path in zip(files, paths, strict=True):
            write_atomic(path, data, READABLE)
        return paths
    written = save(draw(), stem, formats)
    partial_folder = folder.with_name(f"{key}.{os.getpid()}.partial")
    try:  # a cache that cannot be written only costs a redraw
        partial_folder.mkdir(parents=True, exist_ok=True)
        for fmt, path in zip(formats, written, strict=True):
            (partial_folder / f"figure.{fmt}").write_bytes(path.read_bytes())
        os.rename(partial_folder, folder)  # another process's same figure may be there first
    except OSError:
        pass
    remove_tree(partial_folder)
    return written


def _panel_shown(df: pd.DataFrame, testset: str, metric: str, scale: str,
                 fit: Fit | None) -> dict:
    """What `scatter_panel` reads besides its code: the pairs' columns it draws (not, say,
    the path of the table they came from, so that a copy of a table is drawn once), the fit,
    the sets' labels and size (from their folders)."""
    pairs = paired(df, testset, metric)
    refs = sorted(set(pairs["x_testset"])) if len(pairs) else []
    drawn = pairs[[c for c in pairs.columns if c in PANEL_COLUMNS]]
    return {"panel": [testset, metric, scale], "pairs": drawn.to_csv(index=False),
            "fit": None if fit is None else {
                name: value.tolist() if isinstance(value, np.ndarray | np.generic) else value
                for name, value in vars(fit).items()},
            "labels": [_label(t) for t in [testset, *refs]], "size": facts.size(testset)}


@cache
def _drawing_code() -> dict:
    """The code a kept figure was drawn by: this module, the scales and the facts it reads,
    and the libraries' versions."""
    files = {Path(__file__), Path(fits_module.__file__), Path(facts.__file__)}
    return {"files": sorted(sha256_bytes(f.read_bytes()) for f in files),
            "matplotlib": matplotlib.__version__, "numpy": np.__version__}
