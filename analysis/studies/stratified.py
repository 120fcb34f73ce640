"""The stratified analyses of our own runs (Miller et al. 2020, Appendix C; `qashift strata`):
which new sets to compare with which reference, the question features of every set involved,
and the figures and tables: answer types and syntactic divergence per test set, F1 by
annotator agreement, and how much of each drop a shift in answer types, divergence,
agreement, length or overlap predicts (``analysis.stats.reweighting``). The per-question
results these need live in one store; what the analysis reads of them is kept, per stratum,
in a table (``strata.read_table``) that outlives the store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import pandas as pd

from analysis import figures
from analysis.sources import strata
from analysis.sources.records import SystemScores
from analysis.stats import reweighting
from evaluator.core.files import READABLE, write_atomic
from evaluator.data import testsets


def references(have: Iterable[tuple[str, str]], only: Iterable[str] = ()) -> dict[str, str]:
    """{new set: its reference} for every set (of `only`, when given) that some system has
    results on together with the set's reference (`have`: (system, set) pairs); a set
    whose folder is gone is left out."""
    have, only = set(have), set(only)
    found = {}
    for name in sorted({t for _, t in have}):
        if only and name not in only:
            continue
        try:
            ref = testsets.get(name).reference
        except Exception:  # a result outlives its test-set folder
            continue
        if ref and any((s, name) in have and (s, ref) in have for s, _ in have):
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


def current_pairs(table: Iterable[dict]) -> set[tuple[str, str]]:
    """The (system, set) pairs of a stratum table whose rows are today's: the set's sha256
    and the features key as they are now (a set whose folder is gone is not)."""
    key, digests, found = strata.features_key(), {}, set()
    for row in table:
        name = row["testset"]
        if name not in digests:
            try:
                digests[name] = testsets.get(name).sha256
            except Exception:  # a row outlives its test-set folder
                digests[name] = None
        if (row["testset_sha256"], row["features"]) == (digests[name], key):
            found.add((row["system"], name))
    return found


def scores(systems: Sequence[SystemScores], features: Mapping[str, Mapping[str, dict]],
           table: Sequence[dict] = ()) -> tuple[pd.DataFrame, list[dict], int]:
    """The stratum table the analysis reads (``reweighting.stratum_table``): the store's
    systems on the sets with `features`, and a kept table's rows (``strata.read_table``)
    for every (system, set) the store has no per-question results for, where the row's set
    sha256 and features key are today's. Returns that frame, the rows of the table to keep
    (the store's, then every other row of `table` as it was) and how many of the table's
    (system, set) pairs were left out as stale."""
    key = strata.features_key()
    digests = {t: testsets.get(t).sha256 for t in features}
    fresh = [{**r, "testset_sha256": digests[r["testset"]], "features": key}
             for r in reweighting.stratum_table(systems, features,
                                                strata.STRATIFICATIONS).to_dict("records")]
    ours = {(r["system"], r["testset"]) for r in fresh}
    kept = [r for r in table if (r["system"], r["testset"]) not in ours]
    held = current_pairs(kept)
    current = [r for r in kept if r["testset"] in digests and (r["system"], r["testset"]) in held]
    stale = {(r["system"], r["testset"]) for r in kept if r["testset"] in digests} - held
    frame = pd.DataFrame(fresh + current, columns=[*strata.TABLE_COLUMNS])
    return frame[reweighting.STRATUM_COLUMNS], fresh + kept, len(stale)


def write(scores: pd.DataFrame, features: Mapping[str, Mapping[str, dict]],
          references: Mapping[str, str], out: Path | str) -> tuple[list[Path], pd.DataFrame]:
    """The study's Appendix C from a stratum table (`scores`): histograms of answer
    types and syntactic divergence (Figures 5, 6), F1 by annotator agreement (Figure 14),
    reweighted predictions against observed F1 (Figures 15, 16) and every stratification's
    predicted vs observed drop. Returns the files written and the mean-drop table."""
    out = Path(out)
    table = reweighting.drop_table(scores, features, references, strata.STRATIFICATIONS)
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
    per_stratum = pd.concat([reweighting.stratified_scores(scores, references, k)
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
        write_atomic(path, frame.to_csv(index=False, float_format="%.6g").encode(), READABLE)
        written.append(path)
    return written, summary
