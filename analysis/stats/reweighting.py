"""Do shifts in a question feature predict the drops? (Miller et al. 2020, Appendix C.3-C.5)

For a system and a new test set: its F1 in each stratum of the *original* set, reweighted by
how common each stratum is in the *new* set, is the F1 the new set would give if only the mix
of strata had changed. Predicted drop = original F1 - that; observed drop = original F1 -
new F1. The study's example: original 50% NP at 100 and 50% places at 75 F1, new set 30% NP
and 70% places: predicted 0.3 * 100 + 0.7 * 75 = 82.5 (original 87.5).

A stratum of the new set that the original set lacks takes the system's overall original F1
(the only estimate there is); questions a stratification cannot place (no wh-word for the
divergence) are left out of that stratification on both sides.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

import pandas as pd

from analysis.sources.records import SystemScores
from analysis.sources.strata import stratum


def shares(strata: Iterable[str | None]) -> dict[str, float]:
    """How common each stratum is (None left out)."""
    counts = Counter(s for s in strata if s is not None)
    total = sum(counts.values())
    return {k: v / total for k, v in counts.items()} if total else {}


def stratum_f1(scores: Mapping[str, float], strata: Mapping[str, str | None]
               ) -> dict[str, float]:
    """Mean F1 per stratum over the questions that have both a score and a stratum."""
    sums: dict[str, list[float]] = {}
    for qid, f1 in scores.items():
        s = strata.get(qid)
        if s is not None:
            sums.setdefault(s, []).append(f1)
    return {k: sum(v) / len(v) for k, v in sums.items()}


def reweighted(f1_by_stratum: Mapping[str, float], new_shares: Mapping[str, float],
               fallback: float) -> float:
    """Sum over the new set's strata of share x the original F1 of that stratum; NaN where
    the stratification places none of the new set's questions."""
    if not new_shares:
        return float("nan")
    return sum(share * f1_by_stratum.get(k, fallback) for k, share in new_shares.items())


def _strata(features: Mapping[str, dict], kind: str) -> dict[str, str | None]:
    return {qid: stratum(kind, row) for qid, row in features.items()}


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    return sum(values) / len(values) if values else float("nan")


OVERALL = "all"  # the stratification (and stratum) of a system's F1 over every question
STRATUM_COLUMNS = ["system", "testset", "stratification", "stratum", "n", "f1"]


def stratum_table(systems: Sequence[SystemScores], features: Mapping[str, Mapping[str, dict]],
                  kinds: Sequence[str]) -> pd.DataFrame:
    """Per system, test set (of those with features) and stratum: how many of its scored
    questions fall there and their mean F1, plus its F1 over every question (`OVERALL`).
    Everything the drops and Figure 14 need from the per-question scores, and small
    enough to keep when the per-question results are gone."""
    rows = []
    for system in systems:
        for testset in sorted(t for t in system.scores if t in features):
            scores = system.scores[testset]
            rows.append({"system": system.system, "testset": testset,
                         "stratification": OVERALL, "stratum": OVERALL, "n": len(scores),
                         "f1": _mean(scores.values())})
            for kind in kinds:
                strata = _strata(features[testset], kind)
                counts = Counter(strata.get(qid) for qid in scores)
                for k, f1 in sorted(stratum_f1(scores, strata).items()):
                    rows.append({"system": system.system, "testset": testset,
                                 "stratification": kind, "stratum": k, "n": counts[k],
                                 "f1": f1})
    return pd.DataFrame(rows, columns=STRATUM_COLUMNS)


def _by_stratum(scores: pd.DataFrame) -> dict[tuple[str, str, str], dict[str, float]]:
    """{(system, test set, stratification): {stratum: F1}} of a stratum table."""
    out: dict[tuple[str, str, str], dict[str, float]] = {}
    for row in scores.itertuples(index=False):
        out.setdefault((row.system, row.testset, row.stratification), {})[row.stratum] = row.f1
    return out


def pairs(scores: pd.DataFrame, references: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """(system, new set, its reference) for every new set a system has with its reference."""
    have = set(zip(scores["system"], scores["testset"]))
    return [(system, testset, references[testset]) for system, testset in sorted(have)
            if (system, references.get(testset)) in have]


def drop_table(scores: pd.DataFrame, features: Mapping[str, Mapping[str, dict]],
               references: Mapping[str, str], kinds: Sequence[str]) -> pd.DataFrame:
    """Per system, new set and stratification: original, observed and predicted F1 and
    drops, from a stratum table (`stratum_table`) and the new sets' features."""
    by = _by_stratum(scores)
    rows = []
    for system, testset, reference in pairs(scores, references):
        overall = by[system, reference, OVERALL][OVERALL]
        observed = by[system, testset, OVERALL][OVERALL]
        for kind in kinds:
            predicted = reweighted(by.get((system, reference, kind), {}),
                                   shares(_strata(features[testset], kind).values()), overall)
            rows.append({"system": system, "testset": testset, "reference": reference,
                         "stratification": kind, "original_f1": overall,
                         "observed_f1": observed, "predicted_f1": predicted,
                         "observed_drop": overall - observed,
                         "predicted_drop": overall - predicted})
    return pd.DataFrame(rows, columns=["system", "testset", "reference", "stratification",
                                       "original_f1", "observed_f1", "predicted_f1",
                                       "observed_drop", "predicted_drop"])


def drop_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Mean predicted and observed drop per new set and stratification, over systems."""
    g = table.groupby(["testset", "stratification"], sort=False)
    out = g[["observed_drop", "predicted_drop"]].mean()
    out["n_systems"] = g.size()
    out["explained"] = out["predicted_drop"] / out["observed_drop"]
    return out.reset_index()


def share_table(features: Mapping[str, Mapping[str, dict]], kind: str) -> pd.DataFrame:
    """Share of questions per stratum and test set: the histograms of Figures 5 and 6."""
    rows = []
    for testset, found in features.items():
        strata = list(_strata(found, kind).values())
        counted = [s for s in strata if s is not None]
        for k, share in sorted(shares(strata).items()):
            rows.append({"testset": testset, "stratification": kind, "stratum": k,
                         "share": share, "n": len(counted)})
    return pd.DataFrame(rows, columns=["testset", "stratification", "stratum", "share", "n"])


def stratified_scores(scores: pd.DataFrame, references: Mapping[str, str],
                      kind: str) -> pd.DataFrame:
    """Per system, new set and stratum: F1 on the reference (x) and on the new set (y)
    within the stratum, as in Figure 14 (annotator agreement), from a stratum table."""
    by = _by_stratum(scores)
    rows = []
    for system, testset, reference in pairs(scores, references):
        x, y = by.get((system, reference, kind), {}), by.get((system, testset, kind), {})
        for k in sorted(set(x) & set(y)):
            rows.append({"system": system, "testset": testset, "reference": reference,
                         "stratification": kind, "stratum": k, "x": x[k], "y": y[k]})
    return pd.DataFrame(rows, columns=["system", "testset", "reference", "stratification",
                                       "stratum", "x", "y"])
