"""A population study: one plan file says which approaches to train (hyperparameter settings x
seeds x train sizes, on one training split or several) and which test sets every trained system is
scored on. Running it trains and evaluates one stored cell at a time, system by system, so
an interrupted run (Ctrl-C, `kill -9`, a session that ends) resumes where it stopped: every
finished training and evaluation is in the store, and a killed training resumes from its
checkpoint. Failures are recorded and the rest of the plan goes on.

    id: population
    name: Own population on the SQuAD dev training half
    split: squad-dev-train
    testsets: [squad-dev-heldout, new-wiki-test, reddit-test]
    approaches:
      logreg-rajpurkar: {settings: [{}, {l2: 0.001}], seeds: [0, 1], sizes: [null, 1000]}
      bidaf: {}                      # the defaults, seed 0, the whole split
      qanet:                         # several grids for one approach: a list of them
        - {sizes: [null, 1000]}
        - {settings: [{hidden: 32}], sizes: [250]}
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field

from evaluator.bundles import spec as bundles
from evaluator.core.errors import DataError, RunFailure, UserError
from evaluator.core.folders import read_yaml
from evaluator.core.schema import Name, Strict, Text, validate
from evaluator.data import testsets
from evaluator.data.testsets import TestSet
from evaluator.jobs.job import Job
from evaluator.pipeline import matrix
from evaluator.runners.dispatch import Dispatcher
from evaluator.store.store import Store
from evaluator.training import table
from evaluator.training.job import TrainJob
from evaluator.training.run import stored, train

Scalar = bool | int | float | str


class ApproachPlan(Strict):
    settings: list[dict[str, Scalar]] = Field(default_factory=lambda: [{}], min_length=1)
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    sizes: list[int | None] = Field(default_factory=lambda: [None], min_length=1)


class StudyFile(Strict):
    id: Name
    name: Text
    description: Text = ""
    split: Name | list[Name]  # several: every approach plan on each (e.g. with extra data)
    testsets: list[Name] = Field(min_length=1)
    approaches: dict[Name, ApproachPlan | list[ApproachPlan]] = Field(min_length=1)


@dataclass(frozen=True)
class Study:
    id: str
    path: Path
    splits: tuple[TestSet, ...]
    testsets: tuple[TestSet, ...]
    trainings: tuple[TrainJob, ...]  # in the file's order: approach, setting, seed, size

    @property
    def cells(self) -> int:
        return len(self.trainings) * (1 + len(self.testsets))


def load(path: Path) -> Study:
    """The study a plan file describes; unknown approaches, test sets or keys are one-line
    errors, before anything runs."""
    spec = validate(StudyFile, read_yaml(path), path)
    names = spec.split if isinstance(spec.split, list) else [spec.split]
    if not names or len(set(names)) != len(names):
        raise UserError(f"{path}: split must name one training split or several, each once")
    splits = tuple(testsets.get(name) for name in names)
    for split in splits:
        if split.kind != "training":
            raise UserError(f"{path}: split {split.id} is not a training split (kind: "
                            f"training)")
    sets = tuple(testsets.get(t) for t in spec.testsets)
    jobs = []
    for approach_id, plans in spec.approaches.items():
        approach = bundles.get(approach_id)
        if approach.kind != "approach":
            raise UserError(f"{path}: {approach_id} is a {approach.kind} bundle, not an "
                            f"approach")
        for plan in plans if isinstance(plans, list) else [plans]:
            for split, setting, seed, size in itertools.product(splits, plan.settings,
                                                                plan.seeds, plan.sizes):
                jobs.append(TrainJob(approach, split, seed, size, dict(setting)))
    names = [job.system_id for job in jobs]
    if len(set(names)) != len(names):
        raise UserError(f"{path}: the plan names a system twice (a setting equal to the "
                        f"defaults, or a repeated seed or size)")
    return Study(spec.id, path, splits, sets, tuple(jobs))


@dataclass
class StudyStatus:
    trained: int = 0
    training_failed: int = 0
    evaluated: int = 0
    evaluation_failed: int = 0
    pending: int = 0

    def line(self, study: Study) -> str:
        return (f"{study.id}: {len(study.trainings)} systems x {len(study.testsets)} test "
                f"sets | trained {self.trained}, training failed {self.training_failed} | "
                f"evaluated {self.evaluated}, evaluation failed {self.evaluation_failed} | "
                f"{self.pending} cells to go")


def status(study: Study, store: Store) -> StudyStatus:
    """What is stored: trained systems, scored cells, and failures not yet made good."""
    out = StudyStatus()
    if not store.exists():
        out.pending = study.cells
        return out
    failures = store.failures()
    failed = {(f["key"], f["testset"]) for f in failures}
    failed_bundles = {(f["bundle"], f["testset"]) for f in failures}
    for job in study.trainings:
        system = stored(job, store)
        if system is None:
            if (job.key, job.split.id) in failed:
                out.training_failed += 1
            else:
                out.pending += 1
            out.pending += len(study.testsets)
            continue
        out.trained += 1
        for testset in study.testsets:
            if store.get(Job(system.bundle, testset).key) is not None:
                out.evaluated += 1
            elif (system.bundle.id, testset.id) in failed_bundles:
                out.evaluation_failed += 1
            else:
                out.pending += 1
    return out


Say = Callable[[str], None]


def run(study: Study, runner: Dispatcher, store: Store, *, device: str = "auto",
        say: Say = lambda _: None) -> StudyStatus:
    """Train and evaluate every system of the plan that is not stored yet, one system at a
    time (its training, then its test sets); report progress with counts and an ETA."""
    started, done_here = time.monotonic(), 0
    todo = status(study, store).pending
    for number, job in enumerate(study.trainings, 1):
        head = f"[{number}/{len(study.trainings)}] {job.system_id}"
        try:
            system = train(job, runner, store, device=device)
        except RunFailure as failure:
            say(f"{head}: training FAILED ({failure.failure_class}): {failure}")
            continue
        except DataError as error:
            say(f"{head}: training FAILED (data-unavailable): {error}")
            continue
        except UserError as error:  # e.g. another controller is training it right now
            say(f"{head}: skipped: {error}")
            continue
        if not system.cached:
            done_here += 1
        jobs = [Job(system.bundle, testset) for testset in study.testsets]
        report = matrix.run(jobs, runner, store)
        done_here += sum(1 for o in report.outcomes if o.result and not o.result.cached)
        failed = [f"{o.job.testset.id} ({o.failure_class})" for o in report.failed]
        elapsed = time.monotonic() - started
        left = max(0, todo - done_here)
        eta = f", eta {elapsed / done_here * left:.0f} s" if done_here else ""
        say(f"{head}: {'stored earlier' if system.cached else 'trained'}; scored on "
            f"{len(jobs) - len(failed)}/{len(jobs)} test sets"
            + (f", failed: {', '.join(failed)}" if failed else "")
            + f" | {left} cells to go{eta}")
    return status(study, store)


def rows(study: Study, store: Store) -> list[dict]:
    """The results table restricted to the study's systems as the plan makes them now (a
    system trained from an earlier version of its approach is not one of them) and to its
    test sets."""
    current = {job.system_id: hit.row["weights_digest"] for job in study.trainings
               if (hit := stored(job, store)) is not None}
    wanted = {t.id for t in study.testsets}
    families = {job.approach.id: job.approach.metadata.get("family")
                for job in study.trainings}
    references = {t.id: t.reference for t in study.testsets}
    trains = {t.id: t.train for t in study.testsets}
    return [r for r in table.rows(store, references, families, trains)
            if current.get(r["model"]) == r["weights_digest"] and r["testset"] in wanted]
