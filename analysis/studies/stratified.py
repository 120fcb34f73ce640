"""The stratified analyses of our own runs (Miller et al. 2020, Appendix C; `qashift strata`):
which new sets to compare with which reference, the question features of every set involved,
and the figures and tables: answer types and syntactic divergence per test set, F1 by
annotator agreement, and how much of each drop a shift in answer types, divergence,
agreement, length or overlap predicts (``analysis.stats.reweighting``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import pandas as pd

from analysis import figures
from analysis.sources import strata
from analysis.sources.records import SystemScores
from analysis.stats import reweighting
from evaluator.data import testsets


def references(systems: Sequence[SystemScores], only: Iterable[str] = ()) -> dict[str, str]:
    """{new set: its reference} for every set (of `only`, when given) that some system was
    evaluated on together with the set's reference; a set whose folder is gone is left out."""
    only = set(only)
    found = {}
    for name in sorted({t for s in systems for t in s.scores}):
        if only and name not in only:
            continue
        try:
            ref = testsets.get(name).reference
        except Exception:  # a result outlives its test-set folder
            continue
        if ref and any(name in s.scores and ref in s.scores for s in systems):
            found[name] = ref
    return found


def features(references: Mapping[str, str],
             say: Callable[[str], object] = lambda message: None) -> dict[str, dict]:
    """The question features (``analysis.sources.strata``) of every new set and reference,
    each computed once per file and cached; `say` hears each set as it starts."""
    needed = sorted({*references, *references.values()})
    found = {}
    for i, name in enumerate(needed, start=1):
        say(f"[{i}/{len(needed)}] features of {name}")
        found[name] = strata.of_testset(testsets.get(name))
    return found


def write(systems: Sequence[SystemScores], features: Mapping[str, Mapping[str, dict]],
          references: Mapping[str, str], out: Path | str) -> tuple[list[Path], pd.DataFrame]:
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
