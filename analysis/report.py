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

from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from analysis import concurrence, figures, fits, gaps, reweighting, strata
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
            grid = [(t, m, s) for t in testsets if (t, m) in present]
            if not grid:
                continue  # no set has this metric on both axes
            fig = figures.panel_grid(df, grid, by_key, ncols=2)
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


def stratified(systems: Sequence[reweighting.SystemScores],
               features: Mapping[str, Mapping[str, dict]], references: Mapping[str, str],
               out: Path | str) -> tuple[list[Path], pd.DataFrame]:
    """The study's Appendix C for systems with per-question results: histograms of answer
    types and syntactic divergence (Figures 5, 6), F1 by annotator agreement (Figure 14),
    reweighted predictions against observed F1 (Figures 15, 16) and every stratification's
    predicted vs observed drop. Returns the files written and the mean-drop table."""
    out = Path(out)
    table = reweighting.drop_table(systems, features, references, strata.STRATIFICATIONS)
    if table.empty:
        raise ValueError("no system has per-question results on a test set and on its "
                         "reference: evaluate the same systems on both first")
    summary = reweighting.drop_summary(table)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    shares = pd.concat([reweighting.share_table(features, k) for k in strata.STRATIFICATIONS],
                       ignore_index=True)
    for kind, figure, order in (("answer_type", "answer-types", strata.ANSWER_TYPES),
                                ("divergence", "divergence", None)):
        fig = figures.share_bars(shares[shares["stratification"] == kind],
                                 f"{kind.replace('_', ' ').capitalize()}s by test set", order)
        written += figures.save(fig, out / figure)
    per_stratum = pd.concat([reweighting.stratified_scores(systems, features, references, k)
                             for k in strata.STRATIFICATIONS], ignore_index=True)
    agreement = per_stratum[per_stratum["stratification"] == "agreement"]
    fig = figures.xy_by_testset(agreement, "F1 on the reference set, within the stratum",
                                "F1 on {testset}, within the stratum",
                                "F1 by how many gold answers agree", hue="stratum")
    written += figures.save(fig, out / "agreement")
    for kind, figure in (("answer_type", "reweighted-answer-types"),
                         ("divergence", "reweighted-divergence")):
        sub = table[table["stratification"] == kind]
        points = pd.concat([
            pd.DataFrame({"testset": sub["testset"], "x": sub["original_f1"],
                          "y": sub["predicted_f1"], "what": "predicted (reweighted)"}),
            pd.DataFrame({"testset": sub["testset"], "x": sub["original_f1"],
                          "y": sub["observed_f1"], "what": "observed"})], ignore_index=True)
        fig = figures.xy_by_testset(points, "F1 on the reference set", "F1 on {testset}",
                                    f"Reweighting by {kind.replace('_', ' ')}: predicted vs "
                                    f"observed (y = x: no drop)", hue="what")
        written += figures.save(fig, out / figure)
    for name, frame in (("drops", table), ("drops_mean", summary), ("shares", shares),
                        ("strata_f1", per_stratum)):
        path = out / f"{name}.csv"
        frame.to_csv(path, index=False, float_format="%.6g")
        written.append(path)
    return written, summary
