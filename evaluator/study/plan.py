"""The plan file of a study: its schema, its checks (unknown names, a plan too large), and
its expansion into train cells (approaches x settings x seeds x sizes, on each split or
benchmark, with drawn settings), so that a bad plan fails in one line before anything runs.

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

An approach-level study (Liu et al.: an approach trained on a benchmark's training split and
tested on its test split) names `benchmarks` instead of `split` and `testsets`: a test-set id
(trained on the folder's `train:` split) or `{name, train, test, size, paper}` (e.g. SQuAD
downsampled to 1,000 questions: the training split at a train size). `draws: N` adds N
random settings from the approach's search space to its plan's settings (over the first
setting's fixed values), each seeded by the approach name and its number; `selection` is the
recorded rule that picks which run's score enters the approach x benchmark matrix.

    id: approach-level
    benchmarks: [babi-1, fuzzy-uniform, {name: squad-1k, train: squad-dev-train, size: 1000,
                                         test: squad-dev-heldout}]
    selection: first          # first | max | mean over an approach's runs on a benchmark
    approaches:
      bidaf: {settings: [{epochs: 4}], draws: 5}
"""

from __future__ import annotations

import fnmatch
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from evaluator.bundles import spec as bundles
from evaluator.bundles.spec import Bundle
from evaluator.core.errors import UserError
from evaluator.core.folders import read_yaml
from evaluator.core.schema import Name, Strict, Text, validate
from evaluator.data import testsets
from evaluator.data.testsets import TestSet
from evaluator.training.job import TrainJob

Scalar = bool | int | float | str


class ApproachPlan(Strict):
    settings: list[dict[str, Scalar]] = Field(default_factory=lambda: [{}], min_length=1)
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    sizes: list[int | None] = Field(default_factory=lambda: [None], min_length=1)
    draws: int = Field(0, ge=0)  # random settings from the search space, after `settings`


class BenchmarkPair(Strict):
    name: Name
    train: Name
    test: Name
    size: int | None = Field(None, gt=0)  # a seeded downsample of `train`
    paper: str | None = None  # the column of Liu et al.'s tables of the same kind


class StudyFile(Strict):
    id: Name
    name: Text
    description: Text = ""
    split: Name | list[Name] | None = None  # several: every approach plan on each
    testsets: list[Name] = Field(default_factory=list)
    benchmarks: list[Name | BenchmarkPair] = Field(default_factory=list)
    selection: Literal["first", "max", "mean"] = "first"
    approaches: dict[Name, ApproachPlan | list[ApproachPlan]] = Field(min_length=1)

    @model_validator(mode="after")
    def one_kind(self) -> StudyFile:
        if self.benchmarks and (self.split is not None or self.testsets):
            raise ValueError("give either benchmarks (approach-level) or split and testsets")
        if not self.benchmarks and (self.split is None or not self.testsets):
            raise ValueError("give split and testsets, or benchmarks")
        return self


@dataclass(frozen=True)
class Benchmark:
    """An approach-level benchmark: train on `train` (at `size` questions), test on `test`."""

    name: str
    train: TestSet
    test: TestSet
    size: int | None = None
    paper: str | None = None


@dataclass(frozen=True)
class Study:
    id: str
    path: Path
    splits: tuple[TestSet, ...]
    testsets: tuple[TestSet, ...]
    trainings: tuple[TrainJob, ...]  # in the file's order: approach, setting, seed, size
    benchmarks: tuple[Benchmark, ...] = ()  # an approach-level study's
    selection: str = "first"

    def testsets_for(self, job: TrainJob) -> tuple[TestSet, ...]:
        """The sets a system is scored on: every test set of a population study, the test
        sets of the benchmarks it was trained for in an approach-level one."""
        if not self.benchmarks:
            return self.testsets
        return tuple({b.test.id: b.test for b in self.benchmarks
                      if b.train.id == job.split.id and b.size == job.size}.values())

    @property
    def cells(self) -> int:
        return sum(1 + len(self.testsets_for(job)) for job in self.trainings)


def _benchmark(entry: str | BenchmarkPair, path: Path) -> Benchmark:
    if isinstance(entry, str):
        test = testsets.get(entry)
        if not test.train:
            raise UserError(f"{path}: benchmark {entry} has no training split (its folder "
                            f"names no train:)")
        return Benchmark(entry, testsets.get(test.train), test)
    return Benchmark(entry.name, testsets.get(entry.train), testsets.get(entry.test),
                     entry.size, entry.paper)


def draws(approach: Bundle, base: dict, count: int, taken: list[dict]) -> list[dict]:
    """`count` settings drawn from the approach's search space over `base` (its fixed
    values stay), each from a generator seeded by the approach id and the draw's number; a
    draw that trains the same as a setting already taken (the defaults included) is drawn
    again."""
    search = {k: v for k, v in sorted((approach.hyperparameters.get("search") or {}).items())
              if k not in base}
    if count and not search:
        raise UserError(f"{approach.id} has no search space to draw settings from")
    defaults = approach.hyperparameters.get("defaults") or {}
    seen = [{**defaults, **setting} for setting in taken]
    out, number = [], 0
    while len(out) < count:
        if number >= 50 * count:
            raise UserError(f"{approach.id}: only {len(out)} distinct draws from its search "
                            f"space, {count} asked for")
        rng = random.Random(f"{approach.id}|draw|{number}")
        number += 1
        setting = {**base, **{k: rng.choice(values) for k, values in search.items()}}
        if {**defaults, **setting} not in seen:
            seen.append({**defaults, **setting})
            out.append(setting)
    return out


MAX_SYSTEMS = 5_000  # a plan larger than this is a mistake, refused before it is expanded


def _check_grid(path: Path, approach_id: str, plan, places: int, so_far: int) -> None:
    count = (len(plan.settings) + plan.draws) * len(plan.seeds) * places
    if plan.draws > MAX_SYSTEMS or so_far + count > MAX_SYSTEMS:
        raise UserError(f"{path}: {approach_id}: the plan asks for {so_far + count:,} systems "
                        f"or more, over the {MAX_SYSTEMS:,} a plan may hold; split it")


def load(path: Path) -> Study:
    """The study a plan file describes; unknown approaches, test sets or keys are one-line
    errors, before anything runs."""
    spec = validate(StudyFile, read_yaml(path), path)
    benchmarks = tuple(_benchmark(entry, path) for entry in spec.benchmarks)
    if len({b.name for b in benchmarks}) != len(benchmarks):
        raise UserError(f"{path}: the plan names a benchmark twice")
    if benchmarks:
        splits = tuple({b.train.id: b.train for b in benchmarks}.values())
        sets = tuple({b.test.id: b.test for b in benchmarks}.values())
        targets = list({(b.train.id, b.size): (b.train, b.size) for b in benchmarks}.values())
    else:
        names = spec.split if isinstance(spec.split, list) else [spec.split]
        if not names or len(set(names)) != len(names):
            raise UserError(f"{path}: split must name one training split or several, each "
                            f"once")
        splits = tuple(testsets.get(name) for name in names)
        sets = tuple(testsets.get(t) for t in spec.testsets)
        targets = None
    for split in splits:
        if split.kind != "training":
            raise UserError(f"{path}: split {split.id} is not a training split (kind: "
                            f"training)")
    jobs = []
    for approach_id, plans in spec.approaches.items():
        approach = bundles.get(approach_id)
        if approach.kind != "approach":
            raise UserError(f"{path}: {approach_id} is a {approach.kind} bundle, not an "
                            f"approach")
        for plan in plans if isinstance(plans, list) else [plans]:
            _check_grid(path, approach_id, plan, len(targets) if targets else
                        len(splits) * len(plan.sizes), len(jobs))
            settings = [dict(setting) for setting in plan.settings]
            settings += draws(approach, settings[0], plan.draws, settings)
            if targets is not None and plan.sizes != [None]:
                raise UserError(f"{path}: {approach_id}: an approach-level plan takes its "
                                f"train sizes from the benchmarks, not from sizes")
            places = targets or [(split, size) for split in splits for size in plan.sizes]
            for (split, size), setting, seed in itertools.product(places, settings,
                                                                  plan.seeds):
                jobs.append(TrainJob(approach, split, seed, size, setting))
    names = [job.system_id for job in jobs]
    if len(set(names)) != len(names):
        raise UserError(f"{path}: the plan names a system twice (a setting equal to the "
                        f"defaults, or a repeated seed or size)")
    return Study(spec.id, path, splits, sets, tuple(jobs), benchmarks, spec.selection)


def selected(job: TrainJob, only: tuple[str, ...]) -> bool:
    """Whether `job`'s system is one of those the shell patterns `only` name (all if none)."""
    return not only or any(fnmatch.fnmatchcase(job.system_id, p) for p in only)


def with_testsets(study: Study, extra: list[TestSet]) -> Study:
    """The study with more test sets that every system is scored on (a new set for the
    whole population)."""
    have = {t.id for t in study.testsets}
    return replace(study, testsets=study.testsets + tuple(t for t in extra if t.id not in have))


def narrowed(study: Study, *, approaches: tuple[str, ...] = (), systems: tuple[str, ...] = (),
             per_approach: int | None = None,
             runnable: Callable[[TrainJob], bool] = lambda job: True) -> Study:
    """The study with only the trainings chosen, in the plan's order: of these approaches,
    these system ids (shell patterns, as `selected` reads them), and at most `per_approach`
    of each approach among those `runnable` (frozen or stored: a system not trained yet
    counts for none). A name that chooses nothing is one line listing what there is."""
    have = list(dict.fromkeys(job.approach.id for job in study.trainings))
    unknown = [a for a in approaches if a not in have]
    if unknown:
        raise UserError(f"{study.path}: no approach {unknown[0]!r} in the plan; its "
                        f"approaches: {', '.join(have)}")
    for pattern in systems:
        if not any(selected(job, (pattern,)) for job in study.trainings):
            raise UserError(f"{study.path}: no system {pattern!r} in the plan (see `qashift "
                            f"systems`)")
    chosen, count = [], dict.fromkeys(have, 0)
    for job in study.trainings:
        if approaches and job.approach.id not in approaches or not selected(job, systems):
            continue
        if per_approach is not None:
            if count[job.approach.id] >= per_approach or not runnable(job):
                continue
            count[job.approach.id] += 1
        chosen.append(job)
    return replace(study, trainings=tuple(chosen))
