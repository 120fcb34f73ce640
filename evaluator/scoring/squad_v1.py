"""Official SQuAD v1.1 scoring, per question, and the adversarial worst-case variant.

The semantics are those of the official v1.1 evaluation script: normalise (lower-case,
drop every `string.punctuation` character, drop whole-word a/an/the, collapse whitespace),
EM is equality of normalised strings, F1 is token-bag overlap, both take the maximum over
the gold answers, a question without a prediction scores 0. Totals are accumulated in file
order with plain float addition, exactly as the script does, so they agree to the last bit.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from evaluator.data.testsets import Question
from evaluator.scoring import get, register

register("squad-v1.1", version="squad-v1.1/1")(None)

_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


@lru_cache(maxsize=1 << 16)
def normalize_answer(text: str) -> str:
    text = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> bool:
    return normalize_answer(prediction) == normalize_answer(gold)


def _f1_tokens(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    common = Counter(pred_tokens) & Counter(gold_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(pred_tokens)
    recall = 1.0 * num_same / len(gold_tokens)
    return (2 * precision * recall) / (precision + recall)


def f1_score(prediction: str, gold: str) -> float:
    return _f1_tokens(normalize_answer(prediction).split(), normalize_answer(gold).split())


@dataclass(frozen=True)
class Unit:
    """One scored unit: a question (squad-v1.1) or a question group (adversarial-min)."""

    id: str
    em: float
    f1: float
    paragraph: str
    article: str
    missing: int = 0


@dataclass(frozen=True)
class Scores:
    scorer: str
    units: tuple[Unit, ...]
    questions: int
    missing: int
    extra: int

    @property
    def n(self) -> int:
        return len(self.units)

    @property
    def em(self) -> float:
        return 100.0 * _official_total(u.em for u in self.units) / self.n if self.n else 0.0

    @property
    def f1(self) -> float:
        return 100.0 * _official_total(u.f1 for u in self.units) / self.n if self.n else 0.0


def _official_total(values) -> float:
    total = 0
    for v in values:
        total += v
    return total


def score_question(prediction: str | None, answers: Sequence[str]) -> tuple[float, float]:
    """(EM, F1) of one prediction against its gold answers, each in [0, 1]."""
    if prediction is None or not answers:
        return (0, 0)
    norm_pred = normalize_answer(prediction)
    golds = [normalize_answer(gold) for gold in answers]
    if norm_pred in golds:
        # equal non-empty strings give precision = recall = 1, so F1 = 2 * 1 * 1 / 2 = 1.0
        # exactly, which is the maximum: the token count is not needed
        return (1, 1.0 if norm_pred else 0)
    pred_tokens = norm_pred.split()
    return (0, max(_f1_tokens(pred_tokens, gold.split()) for gold in golds))


def score(questions: Sequence[Question], predictions: Mapping[str, str],
          scorer: str = "squad-v1.1") -> Scores:
    """Every question of the set scored by the registered `scorer` (`evaluator.scoring`)."""
    chosen = get(scorer)
    per_question = chosen.question or score_question
    ids = set()
    units = []
    missing = 0
    for q in questions:
        ids.add(q.id)
        prediction = predictions.get(q.id)
        missing += prediction is None
        em, f1 = per_question(prediction, q.answers)
        units.append(Unit(q.id, em, f1, q.paragraph, q.article, int(prediction is None)))
    extra = sum(1 for pid in predictions if pid not in ids)
    if chosen.combine is not None:
        units = chosen.combine(units)
    return Scores(scorer, tuple(units), len(questions), missing, extra)


def group_of(question_id: str) -> str:
    """The group an adversarial-min question belongs to: its id's prefix before the first
    '-' (AddSent's `ID-high-conf`, `ID-turk0` with the original `ID`)."""
    return question_id.split("-", 1)[0]


@register("adversarial-min", version="adversarial-min/1", units="question groups")
def _worst_case_groups(units: list[Unit]) -> list[Unit]:
    """Group by `group_of`; a group scores its members' minimum."""
    groups: dict[str, list[Unit]] = {}
    for u in units:
        groups.setdefault(group_of(u.id), []).append(u)
    return [
        Unit(key, min(m.em for m in members), min(m.f1 for m in members),
             members[0].paragraph, members[0].article, sum(m.missing for m in members))
        for key, members in groups.items()
    ]
