"""How long a plan's cells to go will take, from the times its own table measured. Cells
differ by a factor of a thousand (a logistic regression scored on 500 questions, a MiniLM
fine-tuned on the whole split), so counting cells gives no honest time left; the table
holds each system's training time and each cell's scoring time, and these are near
proportional to the questions trained on times the epochs, and to the questions scored, at a
rate that is an approach's speed times a set's cost per question (a bAbI story is a few
dozen words, a Reddit post a few hundred): what one approach measured on a set carries over
to the others.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import median

from evaluator.data.testsets import TestSet
from evaluator.study.plan import Study
from evaluator.study.rows import Rows
from evaluator.training.job import TrainJob


def _seconds(row: dict, column: str) -> float:
    """A time column of a table row; 0 where a table has none or holds no time (a word,
    NaN, an infinity or a negative number in a hand-edited table)."""
    try:
        value = float(row.get(column) or 0.0)
    except (TypeError, ValueError):
        return 0.0
    return value if math.isfinite(value) and value > 0 else 0.0


def _work(job: TrainJob) -> int:
    """Questions trained on times epochs: what a training's time is near proportional to."""
    return (job.size or job.split.questions) * int(job.hyperparameters.get("epochs") or 1)


@dataclass(frozen=True)
class Rates:
    """Seconds per unit of work fitted as an approach's speed times a set's cost: the log of
    each measured rate is an approach term plus a set term, found by median polish (robust
    to a cell timed while its process was paused). An approach not timed has no rate (None):
    approaches differ too much for one to stand in for another; a set no approach timed
    costs as the median set."""

    approach: dict[str, float]  # log seconds per unit at the median set
    dataset: dict[str, float]  # log cost relative to the median set

    @classmethod
    def fitted(cls, measured: list[tuple[str, str, float]], rounds: int = 100) -> Rates:
        """From (approach, set, seconds per unit) triples, rates above zero; the terms are
        refitted in turn until they settle (to 1e-12 in the log) or for `rounds`."""
        logs = [(a, s, math.log(rate)) for a, s, rate in measured if rate > 0]
        approach = {a: 0.0 for a, _, _ in logs}
        dataset = {s: 0.0 for _, s, _ in logs}
        for _ in range(rounds if logs else 0):
            before = approach
            approach = {a: median(v - dataset[s] for x, s, v in logs if x == a)
                        for a in approach}
            dataset = {s: median(v - approach[a] for a, x, v in logs if x == s)
                       for s in dataset}
            middle = median(dataset.values())
            dataset = {s: v - middle for s, v in dataset.items()}
            approach = {a: v + middle for a, v in approach.items()}
            if max(abs(v - before[a]) for a, v in approach.items()) < 1e-12:
                break
        return cls(approach=approach, dataset=dataset)

    def rate(self, approach: str, dataset: str) -> float | None:
        if approach not in self.approach:
            return None
        return math.exp(self.approach[approach] + self.dataset.get(dataset, 0.0))


@dataclass(frozen=True)
class Pace:
    """One core's seconds per unit of work: `train`, per question and epoch of a training
    (CPU trainings only), by approach and training split; `score`, per question scored, by
    approach and test set."""

    train: Rates
    score: Rates

    @classmethod
    def measured(cls, study: Study, current: dict[str, Rows]) -> Pace:
        """From a table's rows of the plan's systems (`current_rows`)."""
        train: list[tuple[str, str, float]] = []
        cells: dict[str, list[tuple[str, int, float]]] = {}
        questions = {t.id: t.questions for t in study.testsets}  # a row's n counts groups
        for job in study.trainings:
            rows = current.get(job.system_id) or []
            approach = job.approach.id
            trained_s = _seconds(rows[0], "train_wall_s") if rows else 0.0
            if trained_s and rows[0].get("train_device") == "cpu":
                train.append((approach, job.split.id, trained_s / _work(job)))
            cells.setdefault(approach, []).extend(
                (r["testset"], questions[r["testset"]], _seconds(r, "wall_s"))
                for r in rows if r["metric"] == "f1" and questions.get(r["testset"]))
        score = [(a, t, wall / q) for a, timed in cells.items() for t, q, wall in timed]
        return cls(train=Rates.fitted(train), score=Rates.fitted(score))

    def training(self, job: TrainJob) -> float | None:
        rate = self.train.rate(job.approach.id, job.split.id)
        return None if rate is None else rate * _work(job)

    def scoring(self, job: TrainJob, testset: TestSet, limit: int | None = None
                ) -> float | None:
        """Seconds to score the system on the set (on `limit` of its questions), start-up
        aside: a run's start (an interpreter, its libraries) is the same few seconds for every
        approach, far below a whole set's time and above a small sample's, and the matrix
        measures it as it goes (`pipeline.matrix`)."""
        rate = self.score.rate(job.approach.id, testset.id)
        questions = min(limit, testset.questions) if limit else testset.questions
        return None if rate is None else rate * questions

