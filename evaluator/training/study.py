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
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from evaluator.bundles import spec as bundles
from evaluator.bundles.spec import Bundle
from evaluator.core.errors import DataError, RunFailure, UserError
from evaluator.core.folders import read_yaml
from evaluator.core.schema import Name, Strict, Text, validate
from evaluator.data import testsets
from evaluator.data.testsets import TestSet
from evaluator.jobs.job import Job
from evaluator.pipeline import matrix
from evaluator.runners.dispatch import Dispatcher
from evaluator.store.store import Store, StoreError
from evaluator.training import table
from evaluator.training.job import TrainJob
from evaluator.training.run import TrainingBusy, stored, train

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


@dataclass
class StudyStatus:
    """Counts of a plan's cells (a system's training and its evaluations); `by_approach`
    holds the same counts per approach."""

    trained: int = 0
    training_failed: int = 0
    evaluated: int = 0
    evaluation_failed: int = 0
    pending: int = 0
    recorded: int = 0  # systems whose store entries are absent, kept from an earlier table
    systems: int = 0
    by_approach: dict[str, StudyStatus] = field(default_factory=dict)

    def add(self, other: StudyStatus) -> None:
        for f in fields(self):
            if f.name != "by_approach":
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def approach_lines(self) -> list[str]:
        """One line per approach, in the plan's order: where a long study's work is left."""
        width = max((len(a) for a in self.by_approach), default=0)
        return [f"{approach:<{width}}  {s.systems:>4} systems | trained {s.trained:>4}, failed "
                f"{s.training_failed} | evaluated {s.evaluated:>5}, failed "
                f"{s.evaluation_failed} | {s.pending:>4} cells to go"
                for approach, s in self.by_approach.items()]

    def line(self, study: Study) -> str:
        scored = (f"{len(study.benchmarks)} benchmarks" if study.benchmarks
                  else f"{len(study.testsets)} test sets")
        kept = f" (from the table: {self.recorded})" if self.recorded else ""
        return (f"{study.id}: {len(study.trainings)} systems x {scored} | trained "
                f"{self.trained}{kept}, training failed {self.training_failed} | "
                f"evaluated {self.evaluated}, evaluation failed {self.evaluation_failed} | "
                f"{self.pending} cells to go")


Rows = list[dict]


def _current(study: Study, earlier: Rows) -> dict[str, Rows]:
    """An earlier table's rows that still describe the plan: system -> its rows on the plan's
    test sets, where the row's train key is the plan's (same approach code, split, size,
    hyperparameters, seed) and its test set's bytes are today's, for systems whose rows
    name one weights digest."""
    by_system: dict[str, Rows] = {}
    for row in earlier:
        by_system.setdefault(row["model"], []).append(row)
    out = {}
    for job in study.trainings:
        today = {t.id: t.sha256 for t in study.testsets_for(job)}
        mine = [r for r in by_system.get(job.system_id, [])
                if r["train_key"] == job.key and today.get(r["testset"]) == r["testset_sha256"]]
        if mine and len({r["weights_digest"] for r in mine}) == 1:
            out[job.system_id] = mine
    return out


def recorded(study: Study, current: dict[str, Rows]) -> dict[str, Rows]:
    """The systems an earlier results table holds in full for the plan as it is now (its
    `_current` rows), with EM and F1 on every test set the plan scores them on: system ->
    its rows. Such a system need not be trained again when the store that made the table
    is gone (a study that spans machines)."""
    out = {}
    for job in study.trainings:
        mine = current.get(job.system_id, [])
        wanted = {t.id for t in study.testsets_for(job)}
        if wanted and wanted <= _held_testsets(mine):
            out[job.system_id] = mine
    return out


def _held_testsets(rows: Rows, weights_digest: str | None = None) -> set[str]:
    """The test sets on which `rows` (one system's, from `_current`) hold both EM and F1,
    where given only for weights with that digest."""
    metrics: dict[str, set[str]] = {}
    for r in rows:
        if weights_digest is None or r["weights_digest"] == weights_digest:
            metrics.setdefault(r["testset"], set()).add(r["metric"])
    return {t for t, found in metrics.items() if {"em", "f1"} <= found}


def held_cells(study: Study, current: dict[str, Rows], job: TrainJob,
               weights_digest: str | None = None) -> set[str]:
    """Test sets of `job`'s system that an earlier table already scores (`current`, from
    `_current`): a plan that gains test sets, or a system retrained here, deterministically,
    to the weights the table names, scores only the others. Without `weights_digest`, those
    of the table's weights. A set that is the reference of one still to be scored is scored
    again, so that its per-question results are in the store beside the new set's (paired
    comparisons, e.g. `challenge report`, need both)."""
    held = _held_testsets(current.get(job.system_id, []), weights_digest)
    sets = study.testsets_for(job)
    return held - {t.reference for t in sets if t.id not in held}


def selected(job: TrainJob, only: tuple[str, ...]) -> bool:
    """Whether `job`'s system is one of those the shell patterns `only` name (all if none)."""
    return not only or any(fnmatch.fnmatchcase(job.system_id, p) for p in only)


def status(study: Study, store: Store, earlier: Rows = (),
           current: dict[str, Rows] | None = None, only: tuple[str, ...] = ()) -> StudyStatus:
    """What is stored: trained systems, scored cells, and failures not yet made good, in all
    and per approach; a system the store lacks but an earlier table holds in full counts as
    done. `current`: the earlier table's `_current` rows, where the caller has them; `only`:
    shell patterns of the system names to count (all where empty)."""
    out = StudyStatus()
    if current is None:
        current = _current(study, list(earlier))
    kept = recorded(study, current)
    has_store = store.exists()
    failures = store.failures() if has_store else []
    failed = {(f["key"], f["testset"]) for f in failures}  # of this very cell, not a predecessor
    for job in study.trainings:
        if not selected(job, only):
            continue
        sets = study.testsets_for(job)
        this = StudyStatus(systems=1)
        system = stored(job, store)  # the store's, or a frozen artifact
        if system is None and job.system_id in kept:
            this.trained, this.recorded, this.evaluated = 1, 1, len(sets)
        elif system is None:
            held = held_cells(study, current, job)  # kept if retraining gives the same weights
            this.training_failed = int((job.key, job.split.id) in failed)
            this.evaluated = len(held)
            this.pending = 1 - this.training_failed + len(sets) - len(held)
        else:
            this.trained = 1
            held = held_cells(study, current, job, system.row["weights_digest"])
            for testset in sets:
                key = Job(system.bundle, testset).key
                if testset.id in held or store.get(key) is not None:
                    this.evaluated += 1
                elif (key, testset.id) in failed:
                    this.evaluation_failed += 1
                else:
                    this.pending += 1
        out.add(this)
        out.by_approach.setdefault(job.approach.id, StudyStatus()).add(this)
    return out


Say = Callable[[str], None]


def run(study: Study, runner: Dispatcher, store: Store, *, device: str = "auto",
        earlier: Rows = (), only: tuple[str, ...] = (), parallel: int = 1,
        say: Say = lambda _: None, saved: Callable[[], None] = lambda: None) -> StudyStatus:
    """Train and evaluate every system of the plan that is neither stored nor held in full by
    an `earlier` table, one system at a time (its training, then its test sets); report
    progress with counts and an ETA, both counted from the store, so that with two
    controllers on one plan each shows the cells and time left to both. `only`: shell
    patterns of system names, to run a part of the plan first (e.g. `*~250/*`, the small
    train sizes); `parallel`: test sets of a system scored at once; `saved`: called after
    a system whose training or scores this run stored (e.g. to rewrite the results table),
    not after one that was done before."""
    started = time.monotonic()
    current = _current(study, list(earlier))
    before = status(study, store, current=current, only=only)
    todo = before.pending + before.training_failed + before.evaluation_failed  # all retried
    kept = recorded(study, current)
    for number, job in enumerate(study.trainings, 1):
        head = f"[{number}/{len(study.trainings)}] {job.system_id}"
        if not selected(job, only):
            continue
        if job.system_id in kept and stored(job, store) is None:
            say(f"{head}: in the table from an earlier run")
            continue
        try:
            system = train(job, runner, store, device=device)
        except TrainingBusy as busy:  # its controller goes on with it: on to the next system
            say(f"{head}: skipped: {busy}")
            continue
        except StoreError:
            raise  # the store itself failed: every system would; stop with its one-line error
        except RunFailure as failure:
            say(f"{head}: training FAILED ({failure.failure_class}): {failure}")
            continue
        except DataError as error:
            say(f"{head}: training FAILED (data-unavailable): {error}")
            continue
        except UserError as error:
            say(f"{head}: training FAILED: {error}")
            continue
        stored_here = int(not system.cached)
        held = held_cells(study, current, job, system.row["weights_digest"])
        jobs = [Job(system.bundle, testset) for testset in study.testsets_for(job)
                if testset.id not in held]
        # cells another controller is scoring are its to finish: go on to the next system
        report = matrix.run(jobs, runner, store, parallel=parallel, wait_for_busy=False)
        found = sum(1 for o in report.outcomes if o.result and o.result.cached)
        stored_here += len(report.outcomes) - len(report.failed) - found
        if stored_here:
            saved()
        failed = [f"{o.job.testset.id} ({o.failure_class})" for o in report.failed]
        elsewhere = f", {len(report.busy)} being scored by another controller" \
            if report.busy else ""
        left = status(study, store, current=current, only=only).pending
        progress = todo - left  # cells stored since the run began, here or by another run
        elapsed = time.monotonic() - started
        eta = f", eta {elapsed / progress * left:.0f} s" if progress > 0 else ""
        from_table = f" ({len(held)} more in the table)" if held else ""
        found_line = f", {found} of them found scored already" if found else ""
        say(f"{head}: {'stored earlier' if system.cached else 'trained'}; scored on "
            f"{len(jobs) - len(failed) - len(report.busy)}/{len(jobs)} test sets{from_table}"
            f"{found_line}{elsewhere}"
            + (f", failed: {', '.join(failed)}" if failed else "")
            + f" | {left} cells to go{eta}")
    return status(study, store, current=current)


def with_testsets(study: Study, extra: list[TestSet]) -> Study:
    """The study with more test sets that every system is scored on (a new set for the
    whole population)."""
    have = {t.id for t in study.testsets}
    return replace(study, testsets=study.testsets + tuple(t for t in extra if t.id not in have))


def score_frozen(study: Study, sets: list[TestSet], runner: Dispatcher, store: Store, *,
                 parallel: int = 2, say: Say = lambda _: None) -> tuple[int, list[str]]:
    """Score every system of the plan that is stored or frozen on `sets`, `parallel` cells
    at once, training nothing; (cells scored or found, systems skipped as not trained)."""
    jobs, skipped = [], []
    for job in study.trainings:
        system = stored(job, store)
        if system is None:
            skipped.append(job.system_id)
            continue
        jobs += [Job(system.bundle, testset) for testset in sets]
    report = matrix.run(jobs, runner, store, parallel=parallel, progress=say)
    return len(report.outcomes) - len(report.failed), skipped


def rows(study: Study, store: Store, earlier: Rows = ()) -> Rows:
    """The results table restricted to the study's systems as the plan makes them now (a
    system trained from an earlier version of its approach is not one of them) and to its
    test sets; a system the store lacks keeps the rows an `earlier` table holds of it as
    the plan makes it now (all of them, a part of its test sets included: they are results
    honestly obtained, and the system is trained and scored again only where it is not held
    in full), and a system trained again to the weights the table names keeps the table's
    rows on the test sets it was not scored on again. A system trained again to other
    weights keeps the table's rows until the new weights are scored on every test set those
    rows cover, so a table written while it is being scored (by another controller, or when
    a session ends) loses nothing; a system's rows are always those of one set of weights."""
    current = {job.system_id: hit.row["weights_digest"] for job in study.trainings
               if (hit := stored(job, store)) is not None}
    wanted = {(job.system_id, t.id) for job in study.trainings for t in study.testsets_for(job)}
    families = {job.approach.id: job.approach.metadata.get("family")
                for job in study.trainings}
    references = {t.id: t.reference for t in study.testsets}
    trains = {t.id: t.train for t in study.testsets}
    today = {t.id: t.sha256 for t in study.testsets}
    fresh = [r for r in table.rows(store, references, families, trains)
             if current.get(r["model"]) == r["weights_digest"]
             and (r["model"], r["testset"]) in wanted
             and r["testset_sha256"] == today[r["testset"]]]  # not a result on older bytes
    earlier_rows = _current(study, list(earlier))
    fresh_of: dict[str, Rows] = {}
    for r in fresh:
        fresh_of.setdefault(r["model"], []).append(r)
    unfinished = {name for name, found in earlier_rows.items()
                  if name in current and found[0]["weights_digest"] != current[name]
                  and not _held_testsets(found) <= _held_testsets(fresh_of.get(name, []))}
    fresh = [r for r in fresh if r["model"] not in unfinished]
    scored = {(r["model"], r["testset"]) for r in fresh}
    kept = [r for name, found in earlier_rows.items() for r in found
            if name not in current or name in unfinished
            or (current[name] == r["weights_digest"] and (name, r["testset"]) not in scored)]
    return sorted(fresh + kept, key=lambda r: (r["model"], r["testset"], r["metric"]))


@dataclass(frozen=True)
class ApproachMatrix:
    """An approach-level study's score matrix (EM, percent) and the runs behind it (Liu et
    al.'s F1 and F8): `scores[approach][benchmark]` for the cells the selection rule could
    decide, every run with `selected` marking the one(s) that entered the matrix."""

    selection: str
    benchmarks: tuple[str, ...]
    groups: dict[str, str]  # approach -> non-pretrained | pre-trained
    scores: dict[str, dict[str, float]]
    runs: list[dict]

    def complete(self) -> list[str]:
        """Approaches with a score on every benchmark, in plan order."""
        return [a for a in self.groups if len(self.scores.get(a, {})) == len(self.benchmarks)]

    def complete_benchmarks(self) -> list[str]:
        """Benchmarks on which every approach has a score, in plan order (a study under way
        fills cheap benchmarks for every approach first)."""
        return [b for b in self.benchmarks
                if all(b in self.scores.get(a, {}) for a in self.groups)]


def approach_matrix(study: Study, table_rows: Rows) -> ApproachMatrix:
    """Score every approach on every benchmark by the plan's selection rule over its runs
    (settings x seeds, in plan order), from the study's table rows (`rows`): `first`, the
    first run (the defaults where the plan lists them first); `max` and `mean` over all runs.
    A cell whose deciding runs are not all scored stays empty: a rule is never applied to a
    part of its runs."""
    if not study.benchmarks:
        raise UserError(f"{study.path}: names no benchmarks: an approach x benchmark matrix "
                        f"needs an approach-level plan")
    groups = {job.approach.id: ("pre-trained" if job.approach.metadata.get("family")
                                == "pretrained" else "non-pretrained")
              for job in study.trainings}
    scored = {(r["model"], r["testset"], r["metric"]): float(r["value"]) for r in table_rows}
    runs, scores = [], {}
    for benchmark in study.benchmarks:
        for approach in groups:
            mine = [{"approach": approach, "benchmark": benchmark.name,
                     "system": job.system_id, "seed": job.seed,
                     "hyperparameters": job.hyperparameters,
                     "em": scored.get((job.system_id, benchmark.test.id, "em")),
                     "f1": scored.get((job.system_id, benchmark.test.id, "f1")),
                     "selected": False}
                    for job in study.trainings
                    if (job.approach.id, job.split.id, job.size)
                    == (approach, benchmark.train.id, benchmark.size)]
            runs += mine
            decide = mine[:1] if study.selection == "first" else mine
            if not decide or any(r["em"] is None for r in decide):
                continue
            ems = [r["em"] for r in decide]
            value = max(ems) if study.selection == "max" else sum(ems) / len(ems)
            chosen = decide if study.selection == "mean" else \
                [next(r for r in decide if r["em"] == value)]
            for r in chosen:
                r["selected"] = True
            scores.setdefault(approach, {})[benchmark.name] = value
    return ApproachMatrix(study.selection, tuple(b.name for b in study.benchmarks), groups,
                          scores, runs)
