"""Scores for challenge and derived sets: rEM_k, DICE, and the relative change of an ablation.

rEM_k (Schlegel et al.): a prediction is right when it has at most k words and contains the
gold answer. The paper does not say how words are counted or whether case matters. Here
words are split on whitespace, and both strings are compared lower-cased after trimming.
DICE = |B+ & I+ & C+| / |B+ & C+|. Its interval is the normal approximation used in the
paper. It is undefined (None) when no triple has both B and C right. Cells are micro-averaged
by pooling counts. Two models are compared with Fisher's exact test on (successes, failures).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass

DEFAULT_K = 5
DEFAULT_LEVEL = 0.95


def rem_k(prediction: str | None, gold: str, k: int = DEFAULT_K) -> bool:
    """Relaxed exact match: at most `k` whitespace words and the gold answer inside it."""
    if prediction is None:
        return False
    pred = prediction.strip().lower()
    return len(pred.split()) <= k and gold.strip().lower() in pred


@dataclass(frozen=True)
class Proportion:
    """successes / n with a normal-approximation interval (value None when n == 0)."""

    successes: int
    n: int
    value: float | None
    lo: float | None
    hi: float | None
    level: float

    def percent(self) -> str:
        if self.value is None:
            return "undefined (n = 0)"
        margin = 100 * (self.value - self.lo) if self.lo is not None else 0.0
        return f"{100 * self.value:.1f} ± {margin:.1f} ({self.successes}/{self.n})"

    def to_dict(self) -> dict:
        return asdict(self)


def normal_proportion(successes: int, n: int, level: float = DEFAULT_LEVEL) -> Proportion:
    """p ± z * sqrt(p (1 - p) / n), clipped to [0, 1], as statsmodels' 'normal' method."""
    if n == 0:
        return Proportion(successes, 0, None, None, None, level)
    p = successes / n
    z = statistics.NormalDist().inv_cdf(0.5 + level / 2)
    margin = z * math.sqrt(p * (1 - p) / n)
    return Proportion(successes, n, p, max(0.0, p - margin), min(1.0, p + margin), level)


@dataclass(frozen=True)
class TripleOutcome:
    """One aligned triple scored for one model."""

    id: str
    category: str
    count: int
    b: bool
    i: bool
    c: bool
    echoed_baseline: bool  # the intervention prediction rEM-matches the baseline answer A


def dice(outcomes: Iterable[TripleOutcome], level: float = DEFAULT_LEVEL) -> Proportion:
    """|B+ & I+ & C+| / |B+ & C+| with its normal-approximation interval."""
    eligible = [o for o in outcomes if o.b and o.c]
    return normal_proportion(sum(o.i for o in eligible), len(eligible), level)


def micro_average(cells: Iterable[Proportion], level: float = DEFAULT_LEVEL) -> Proportion:
    """Pool numerators and denominators over cells (models, training sets) before dividing."""
    cells = list(cells)
    return normal_proportion(sum(c.successes for c in cells), sum(c.n for c in cells), level)


def fisher_test(a: Proportion, b: Proportion) -> float:
    """Two-sided Fisher's exact p-value on the 2x2 table (successes, failures) x (a, b)."""
    from scipy.stats import fisher_exact  # lazy: scipy.stats loads in 2.5 s

    table = [[a.successes, a.n - a.successes], [b.successes, b.n - b.successes]]
    return float(fisher_exact(table, alternative="two-sided")[1])


def breakdown(outcomes: Sequence[TripleOutcome], by: str,
              level: float = DEFAULT_LEVEL) -> dict[object, Proportion]:
    """DICE per value of `by` ('category' or 'count')."""
    keys = sorted({getattr(o, by) for o in outcomes}, key=str)
    return {key: dice([o for o in outcomes if getattr(o, by) == key], level) for key in keys}


def baseline_echo(outcomes: Iterable[TripleOutcome], level: float = DEFAULT_LEVEL) -> Proportion:
    """Among intervention failures with B and C right, the share answering the baseline A."""
    failures = [o for o in outcomes if o.b and o.c and not o.i]
    return normal_proportion(sum(o.echoed_baseline for o in failures), len(failures), level)


def consistency(outcomes: Sequence[TripleOutcome], level: float = DEFAULT_LEVEL) -> Proportion:
    """Gardner et al.'s consistency on {B, I} pairs: |B+ & I+| / N."""
    return normal_proportion(sum(o.b and o.i for o in outcomes), len(outcomes), level)


def part_accuracy(outcomes: Sequence[TripleOutcome], part: str,
                  level: float = DEFAULT_LEVEL) -> Proportion:
    """rEM_k on one part ('b', 'i' or 'c') of the aligned set."""
    return normal_proportion(sum(getattr(o, part) for o in outcomes), len(outcomes), level)


def score_triples(parts: Mapping[str, dict], predictions: Mapping[str, Mapping[str, str]],
                  k: int = DEFAULT_K) -> list[TripleOutcome]:
    """Outcomes from the three SQuAD-format files (keys baseline/intervention/control) and a
    model's predictions on each; triples are aligned by question id."""
    golds = {}
    for part, raw in parts.items():
        golds[part] = {qa["id"]: qa for a in raw["data"] for p in a["paragraphs"]
                       for qa in p["qas"]}
    out = []
    for qid, i_qa in golds["intervention"].items():
        meta = i_qa["sam"]
        pred_i = predictions["intervention"].get(qid)
        out.append(TripleOutcome(
            qid, meta["category"], int(meta["count"]),
            rem_k(predictions["baseline"].get(qid), golds["baseline"][qid]["answers"][0]["text"],
                  k),
            rem_k(pred_i, i_qa["answers"][0]["text"], k),
            rem_k(predictions["control"].get(qid), golds["control"][qid]["answers"][0]["text"],
                  k),
            rem_k(pred_i, meta["baseline_answer"], k)))
    return out


# --- ablations: relative change with seeds ----------------------------------------------------
@dataclass(frozen=True)
class SeedSummary:
    mean: float
    sd: float | None  # sample standard deviation over seeds; None for one seed
    per_seed: dict

    def text(self) -> str:
        return f"{self.mean:.1f}" if self.sd is None else f"{self.mean:.1f} (sd {self.sd:.2f})"


def relative_change(ablated: float, original: float) -> float | None:
    """(ablated - original) / original x 100, as in [S] Tables 2, 3 and 9."""
    return None if original == 0 else 100.0 * (ablated - original) / original


def per_seed_scores(units: Iterable, seed_of) -> dict[str, SeedSummary]:
    """EM and F1 (mean and spread over seeds) from per-question units; `seed_of(id)` gives a
    unit's seed (None for an unseeded set)."""
    groups: dict[object, list] = {}
    for u in units:
        groups.setdefault(seed_of(u.id), []).append(u)
    out = {}
    for metric in ("em", "f1"):
        per_seed = {seed: 100 * statistics.fmean(getattr(u, metric) for u in us)
                    for seed, us in groups.items()}
        values = list(per_seed.values())
        sd = statistics.stdev(values) if len(values) > 1 else None
        out[metric] = SeedSummary(statistics.fmean(values), sd, per_seed)
    return out
