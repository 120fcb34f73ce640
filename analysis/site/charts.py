"""The site's figures as its pages show them: each PNG with its size, downloads and a text
alternative that says what a sighted reader takes from it (the numbers, not only the kind
of plot); the approach-level concurrence page's tables and figures."""

from __future__ import annotations

import struct
from pathlib import Path

import pandas as pd

from analysis import figures
from analysis.figures import METRIC_LABEL
from analysis.site import export
from analysis.sources.tidy import new_testsets, paired
from analysis.stats import fits as fits_mod

METRIC_ORDER = ("f1", "em")  # F1 first: the headline metric of SQuAD leaderboards


def figure(figures_dir: Path, stem: str, alt: str, caption: str) -> dict | None:
    png = figures_dir / f"{stem}.png"
    if not png.exists():
        return None
    width, height = _png_size(png)
    downloads = [fmt for fmt in ("svg", "pdf") if (figures_dir / f"{stem}.{fmt}").exists()]
    return {"stem": stem, "alt": alt, "caption": caption, "width": width // 2,
            "height": height // 2, "downloads": downloads}


def _png_size(path: Path) -> tuple[int, int]:
    with open(path, "rb") as handle:
        head = handle.read(24)
    return struct.unpack(">II", head[16:24])


def scatter_alt(df, testsets, metric, scale, fits_table, labels) -> str:
    """Say what the scatter shows, with the numbers a sighted reader takes from it."""
    parts = []
    for t in testsets:
        pairs = paired(df, t, metric)
        models = pairs[pairs["kind"] == "model"]
        text = (f"{labels.get(t, t)}: {int((models['y'] < models['x']).sum())} of "
                f"{len(models)} models score lower than on the original set")
        hit = fits_table[(fits_table["testset"] == t) & (fits_table["metric"] == metric)
                         & (fits_table["scale"] == scale)] if len(fits_table) else []
        if len(hit):
            text += f", {scale} fit slope {hit['slope'].iat[0]:.2f}"
        parts.append(text)
    m = METRIC_LABEL[metric]
    return (f"Scatter plot{'s' if len(testsets) > 1 else ''} of {m} on the new test set "
            f"(vertical) against {m} on the original test set (horizontal), {scale} axes; "
            f"models as dots, humans as stars, the line y = x dashed and the trend fit solid. "
            + "; ".join(parts) + ".")


def overview_figures(df, figures_dir, fits_table, labels) -> list[dict]:
    testsets = new_testsets(df)
    out = []
    for m in METRIC_ORDER:
        for s in fits_mod.SCALES:
            fig = figure(figures_dir, f"grid-{m}-{s}",
                          scatter_alt(df, testsets, m, s, fits_table, labels),
                          f"{METRIC_LABEL[m]} on each new test set against {METRIC_LABEL[m]} "
                          f"on the original test set, {s} axes.")
            if fig:
                out.append(fig)
    return out


def tab(df, t, m, rows, figures_dir, fits_table, labels) -> dict:
    has_ref = any(r["original_testset"] for r in rows)
    alt = " ".join(scatter_alt(df, [t], m, s, fits_table, labels) for s in fits_mod.SCALES)
    fig = figure(figures_dir, f"{t}-{m}", alt,
                  f"{labels.get(t, t)}, {METRIC_LABEL[m]}: linear (left) and probit (right) "
                  f"axes.") if has_ref else None
    ci = sorted({"no interval" if r["lo"] is None else "interval" for r in rows})
    return {"metric": m, "rows": rows, "has_ref": has_ref, "figure": fig,
            "n_paired": sum(r["rank_change"] is not None for r in rows),
            "no_intervals": ci == ["no interval"]}


def approach_level(page: dict, figures_dir: Path, data_dir: Path) -> dict:
    """The concurrence page's tables and figure: the versus-reference rows per benchmark
    (one cell group per subset), the approach x benchmark matrix, written as data too."""
    versus, scores = page["versus"], page["scores"]
    export.write_table(data_dir / "approach-level-versus", versus)
    matrix = scores.reset_index().rename(columns={"index": "approach"})
    matrix.insert(1, "group", [page["groups"].get(a, "") for a in scores.index])
    export.write_table(data_dir / "approach-matrix", matrix)
    figures.save(page["tau_figure"], figures_dir / "approach-level-tau")
    figures.save(page["matrix_figure"], figures_dir / "approach-level-matrix")
    rows = []
    for benchmark, part in versus.groupby("benchmark", sort=False):
        cells = {c["subset"]: c for c in export.records(part)}
        rows.append({"benchmark": benchmark,
                     "cells": [cells.get(label) for label in page["subsets"]]})
    return {"level": {k: page[k] for k in ("mode", "reference", "variant", "threshold",
                                           "n_boot", "seed", "subsets")},
            "versus_rows": rows, "benchmarks": list(scores.columns),
            "matrix": [{"approach": a, "group": page["groups"].get(a, ""),
                        "scores": [export.num(v) for v in scores.loc[a]]} for a in scores.index],
            "tau_figure": figure(figures_dir, "approach-level-tau",
                                  f"Kendall tau-{page['variant']} of every benchmark with "
                                  f"{page['reference']} over the approaches, all and per "
                                  f"group; the dashed line is the concurrence threshold "
                                  f"{page['threshold']:g}.",
                                  f"Approach-level concurrence with {page['reference']}."),
            "matrix_figure": figure(figures_dir, "approach-level-matrix",
                                     f"Heat map of the scores of {len(scores)} approaches on "
                                     f"{len(scores.columns)} benchmarks, each benchmark "
                                     f"coloured from its lowest to its highest score.",
                                     "Every approach on every benchmark (the table below).")}


def heatmaps(conc: pd.DataFrame, figures_dir: Path, labels) -> list[dict]:
    out = []
    for m in METRIC_ORDER:
        pairs = conc[conc["metric"] == m] if len(conc) else conc
        if not len(pairs):
            continue
        values = "; ".join(f"{labels.get(p['a'], p['a'])} and {labels.get(p['b'], p['b'])} "
                           f"{p['kendall_tau_b']:.2f}" for p in pairs.to_dict("records"))
        fig = figure(figures_dir, f"concurrence-{m}",
                      f"Heat map of Kendall tau-b rank correlation between test sets, "
                      f"{METRIC_LABEL[m]}, over {int(pairs['n_models'].iat[0])} models: "
                      f"{values}.",
                      f"Concurrence ({METRIC_LABEL[m]}): Kendall τ-b between every pair of "
                      f"test sets.")
        if fig:
            out.append(fig)
    return out
