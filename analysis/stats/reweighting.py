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
    """Sum over the new set's strata of share x the original F1 of that stratum."""
    return sum(share * f1_by_stratum.get(k, fallback) for k, share in new_shares.items())


def _strata(features: Mapping[str, dict], kind: str) -> dict[str, str | None]:
    return {qid: stratum(kind, row) for qid, row in features.items()}


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    return sum(values) / len(values) if values else float("nan")


def pairs(systems: Sequence[SystemScores], references: Mapping[str, str]
          ) -> list[tuple[SystemScores, str, str]]:
    """(system, new set, its reference) for every new set a system has with its reference."""
    return [(s, t, references[t]) for s in systems for t in sorted(s.scores)
            if references.get(t) in s.scores]


def drop_table(systems: Sequence[SystemScores], features: Mapping[str, Mapping[str, dict]],
               references: Mapping[str, str], kinds: Sequence[str]) -> pd.DataFrame:
    """Per system, new set and stratification: original, observed and predicted F1 and drops."""
    rows = []
    for system, testset, reference in pairs(systems, references):
        original, new = system.scores[reference], system.scores[testset]
        overall = _mean(original.values())
        observed = _mean(new.values())
        for kind in kinds:
            by = stratum_f1(original, _strata(features[reference], kind))
            predicted = reweighted(by, shares(_strata(features[testset], kind).values()),
                                   overall)
            rows.append({"system": system.system, "testset": testset, "reference": reference,
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


def stratified_scores(systems: Sequence[SystemScores],
                      features: Mapping[str, Mapping[str, dict]],
                      references: Mapping[str, str], kind: str) -> pd.DataFrame:
    """Per system, new set and stratum: F1 on the reference (x) and on the new set (y)
    within the stratum, as in Figure 14 (annotator agreement)."""
    rows = []
    for system, testset, reference in pairs(systems, references):
        x = stratum_f1(system.scores[reference], _strata(features[reference], kind))
        y = stratum_f1(system.scores[testset], _strata(features[testset], kind))
        for k in sorted(set(x) & set(y)):
            rows.append({"system": system.system, "testset": testset, "reference": reference,
                         "stratification": kind, "stratum": k, "x": x[k], "y": y[k]})
    return pd.DataFrame(rows, columns=["system", "testset", "reference", "stratification",
                                       "stratum", "x", "y"])
