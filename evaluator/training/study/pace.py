"""How long a plan's cells to go will take, from the times its own table measured. Cells
differ by a factor of a thousand (a logistic regression scored on 500 questions, a MiniLM
fine-tuned on the whole split), so counting cells gives no honest time left; the table
holds each system's training time and each cell's scoring time, and per approach these are
near proportional to the questions trained on times the epochs, and to the questions scored.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

from evaluator.data.testsets import TestSet
from evaluator.training.job import TrainJob
from evaluator.training.study.plan import Study
from evaluator.training.study.rows import Rows


def _seconds(row: dict, column: str) -> float:
    """A time column of a table row; 0 where a table has none."""
    return float(row.get(column) or 0.0)


def _work(job: TrainJob) -> int:
    """Questions trained on times epochs: what a training's time is near proportional to."""
    return (job.size or job.split.questions) * int(job.hyperparameters.get("epochs") or 1)


@dataclass(frozen=True)
class Pace:
    """One core's seconds per unit of work, per approach, the median over the table's
    systems and cells (robust to a cell timed while its process was paused): `train`, per
    question and epoch of a training (CPU trainings only); `score`, per question scored. For
    an approach the table has not timed yet there is no estimate (None): approaches differ
    too much for one to stand in for another."""

    train: dict[str, float]
    score: dict[str, float]

    @classmethod
    def measured(cls, study: Study, current: dict[str, Rows]) -> Pace:
        """From a table's rows of the plan's systems (`current_rows`)."""
        train: dict[str, list[float]] = {}
        score: dict[str, list[float]] = {}
        questions = {t.id: t.questions for t in study.testsets}  # a row's n counts groups
        for job in study.trainings:
            rows = current.get(job.system_id) or []
            approach = job.approach.id
            trained_s = _seconds(rows[0], "train_wall_s") if rows else 0.0
            if trained_s and rows[0].get("train_device") == "cpu":
                train.setdefault(approach, []).append(trained_s / _work(job))
            score.setdefault(approach, []).extend(
                _seconds(r, "wall_s") / questions[r["testset"]] for r in rows
                if r["metric"] == "f1" and questions.get(r["testset"]) and _seconds(r, "wall_s"))
        return cls(train={a: median(found) for a, found in train.items()},
                   score={a: median(found) for a, found in score.items() if found})

    def training(self, job: TrainJob) -> float | None:
        rate = self.train.get(job.approach.id)
        return None if rate is None else rate * _work(job)

    def scoring(self, job: TrainJob, testset: TestSet) -> float | None:
        rate = self.score.get(job.approach.id)
        return None if rate is None else rate * testset.questions
