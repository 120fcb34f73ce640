"""Where accuracy goes: adaptivity gap, distribution gap, and rank changes.

Miller et al. 2020 split the drop from the original test set to a shifted set in two:

* adaptivity gap = original - New-Wiki (same distribution, fresh questions: the cost of
  years of test-set reuse),
* distribution gap = New-Wiki - shifted set (the cost of the new distribution),

so that total drop = original - shifted = adaptivity gap + distribution gap.
"""

from __future__ import annotations

import pandas as pd

from analysis.sources import facts
from analysis.sources.tidy import new_testsets, paired


def gaps(df: pd.DataFrame, metric: str, replication: str | None = None) -> pd.DataFrame:
    """Per model and shifted set: original, replication (New-Wiki), shifted, the two gaps
    and total drop. The replication set is the frame's set of kind `replication` unless given.

    Only models with all three numbers appear, and only where the shifted set and the
    replication set are measured against the same original set: the two gaps add up to the
    drop from one starting point (AddOneSent against SQuAD dev beside New-Wiki against SQuAD
    test would not). The replication set itself gets a row with distribution gap 0, so its
    adaptivity gap is always listed.
    """
    replication = replication or facts.replication_of(set(df["testset"])) or "new-wiki"
    base = paired(df, replication, metric)
    if base.empty:
        return pd.DataFrame(columns=["model", "kind", "metric", "testset", "original",
                                     replication, "shifted", "adaptivity_gap",
                                     "distribution_gap", "total_drop"])
    base = base.set_index("model")
    rows = []
    for testset in new_testsets(df):
        other = paired(df, testset, metric).set_index("model")
        for model in base.index.intersection(other.index):
            if other.at[model, "x_testset"] != base.at[model, "x_testset"]:
                continue  # another original set: another starting point for its drop
            orig, nw, shifted = base.at[model, "x"], base.at[model, "y"], other.at[model, "y"]
            rows.append({"model": model, "kind": base.at[model, "kind"], "metric": metric,
                         "testset": testset, "original": orig, replication: nw,
                         "shifted": shifted, "adaptivity_gap": orig - nw,
                         "distribution_gap": nw - shifted, "total_drop": orig - shifted})
    return pd.DataFrame(rows)


def average_gaps(per_model: pd.DataFrame) -> pd.DataFrame:
    """Mean gaps per (kind, metric, testset), with the number of models averaged."""
    cols = ["adaptivity_gap", "distribution_gap", "total_drop"]
    g = per_model.groupby(["kind", "metric", "testset"], sort=False)
    out = g[cols].mean()
    out["n_models"] = g.size()
    return out.reset_index()


def rank_changes(df: pd.DataFrame, testset: str, metric: str) -> pd.DataFrame:
    """Rank of each model (1 = best, ties share the best rank) on the original and new set.

    delta = rank on new - rank on original: positive means the model fell behind others.
    """
    pairs = paired(df, testset, metric)
    pairs = pairs[pairs["kind"] == "model"]
    out = pd.DataFrame({"model": pairs["model"], "testset": testset, "metric": metric,
                        "original": pairs["x"], "new": pairs["y"]})
    out["rank_original"] = out["original"].rank(ascending=False, method="min").astype(int)
    out["rank_new"] = out["new"].rank(ascending=False, method="min").astype(int)
    out["delta"] = out["rank_new"] - out["rank_original"]
    return out.sort_values(["rank_original", "model"]).reset_index(drop=True)
