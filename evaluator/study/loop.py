"""The run loop: train and score a plan one system at a time, each cell stored as it ends,
so an interrupted run resumes where it stopped and a failure leaves the rest of the plan
going."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from statistics import median

from evaluator.api import evaluation
from evaluator.api.evaluation import Evaluation, EvaluationConfig
from evaluator.core import console
from evaluator.core.errors import DataError, RunFailure, UserError
from evaluator.data import testsets
from evaluator.data.testsets import TestSet
from evaluator.jobs.job import Job
from evaluator.pipeline import matrix, prepared
from evaluator.runners.dispatch import Dispatcher
from evaluator.store.store import Store, StoreError
from evaluator.study.pace import Pace
from evaluator.study.plan import Study, load, selected
from evaluator.study.rows import Rows, current_rows, held_cells, recorded
from evaluator.study.status import StudyStatus, status
from evaluator.training.run import TrainingBusy, stored, train

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
    current = current_rows(study, list(earlier))
    before = status(study, store, current=current, only=only)
    todo = before.pending + before.training_failed + before.evaluation_failed  # all retried
    kept = recorded(study, current)
    for number, job in enumerate(study.trainings, 1):
        head = f"[{number}/{len(study.trainings)}] {job.system_id}"
        if not selected(job, only):
            continue
        if job.system_id in kept and stored(job, store, unpack=False) is None:
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
        sets = [testset.id for testset in study.testsets_for(job) if testset.id not in held]
        # cells another controller is scoring are its to finish: go on to the next system
        config = EvaluationConfig(bundles=(system.bundle.id,), testsets=tuple(sets),
                                  runner=runner.requested, parallel=parallel)
        report = evaluation.evaluate(config, store, dispatcher=runner, chosen=[system.bundle],
                                     wait_for_busy=False).report
        found = sum(1 for o in report.outcomes if o.result and o.result.cached)
        stored_here += len(report.outcomes) - len(report.failed) - found
        if stored_here:
            saved()
        failed = [f"{o.job.testset.id} ({o.failure_class})" for o in report.failed]
        elsewhere = f", {len(report.busy)} being scored by another controller" \
            if report.busy else ""
        now = status(study, store, current=current, only=only)
        left = now.pending
        eta = _eta(time.monotonic() - started, before, now, todo)
        from_table = f" ({len(held)} more in the table)" if held else ""
        found_line = f", {found} of them found scored already" if found else ""
        say(f"{head}: {'stored earlier' if system.cached else 'trained'}; scored on "
            f"{len(sets) - len(failed) - len(report.busy)}/{len(sets)} test sets{from_table}"
            f"{found_line}{elsewhere}"
            + (f", failed: {', '.join(failed)}" if failed else "")
            + f" | {left} cells to go{eta}")
    return status(study, store, current=current)


def score_frozen(study: Study, sets: list[TestSet], runner: Dispatcher, store: Store, *,
                 parallel: int = 2, say: Say = lambda _: None,
                 held: Callable[[str, str], bool] = lambda system, testset: False,
                 saved: Callable[[], object] = lambda: None,
                 earlier: Rows = ()) -> tuple[int, list[str]]:
    """Score every system of the plan that is stored or frozen on `sets`, `parallel` cells
    at once, training nothing, except the (system, set) cells `held` says are had already;
    `saved` is called each time all of a system's cells have ended, one of them newly
    scored, so that a caller can keep its table current through a long run; the ETA weighs
    each cell by its approach's pace in the `earlier` table where it has one; (cells scored
    or found, systems skipped as not trained)."""
    chosen, skipped, left, fresh = [], [], {}, set()
    for job in study.trainings:
        if all(held(job.system_id, testset.id) for testset in sets):
            continue
        system = stored(job, store)
        if system is None:
            skipped.append(job.system_id)
            continue
        chosen.append(system.bundle)
        left[system.bundle.id] = sum(not held(job.system_id, t.id) for t in sets)

    def ended(outcome: matrix.Outcome) -> None:
        bundle = outcome.job.bundle.id
        left[bundle] -= 1
        if outcome.result is not None and not outcome.result.cached:
            fresh.add(bundle)
        if left[bundle] == 0 and bundle in fresh:
            saved()

    started = time.time()
    config = EvaluationConfig(bundles=tuple(b.id for b in chosen),
                              testsets=tuple(t.id for t in sets), runner=runner.requested,
                              parallel=parallel)
    report = evaluation.evaluate(
        config, store, dispatcher=runner, chosen=chosen,
        keep=lambda cell: not held(cell.bundle.id, cell.testset.id), progress=say,
        ended=ended, cost=scoring_cost(study, sets, earlier=earlier)).report
    say(cost_line(report, prepared.made_since(store.workspace, started)))
    return len(report.outcomes) - len(report.failed), skipped


def score_with_references(plan: Path, only: tuple[str, ...], held: set[tuple[str, str]],
                          store: Store, runner: Dispatcher, *, parallel: int = 2,
                          saved: Callable[[], object] = lambda: None, say: Say = lambda _: None,
                          warn: Say = lambda _: None) -> int:
    """Score the plan's systems trained on a whole split on its new sets (`only`, else those
    with a reference that are not derived) and their references, skipping the (system, set)
    cells `held`: resumable, as cells are stored, and nothing is trained; `saved` after each
    system; the cells scored or found."""
    found = load(plan)
    new = [t for t in found.testsets
           if t.reference and (t.id in only if only else t.kind != "derived")]
    if not new:
        raise UserError(f"{plan}: no test set with a reference to score"
                        + (f" among {', '.join(only)}" if only else ""))
    sets = list({t.id: t for t in [*(testsets.get(t.reference) for t in new), *new]}.values())
    whole = replace(found, trainings=tuple(j for j in found.trainings if j.size is None))
    say(f"{plan}: {len(whole.trainings)} systems trained on a whole split, on "
        f"{', '.join(t.id for t in sets)}")
    done, skipped = score_frozen(whole, sets, runner, store, parallel=parallel, say=say,
                                 held=lambda system, testset: (system, testset) in held,
                                 saved=saved)
    if skipped:
        warn(f"{len(skipped)} systems of {plan} are neither frozen nor in this store and "
             f"were not scored (e.g. {skipped[0]})")
    say(f"{plan}: {done} cells scored or found")
    return done


def cost_line(report: matrix.MatrixReport, preparations: list[dict]) -> str:
    """What a scoring run cost in CPU time: its cells' processes and its preparations."""
    cpu, counted, uncounted = report.cpu_seconds()
    prep, prep_uncounted = prepared.cpu_seconds(preparations)
    line = (f"CPU time of this run: {cpu / 60:.1f} min in {counted} cells' processes, "
            f"{prep / 60:.1f} min in {len(preparations)} preparations, "
            f"{(cpu + prep) / 60:.1f} min in all")
    if uncounted or prep_uncounted:
        line += (f" ({uncounted} cells and {prep_uncounted} preparations ran where their "
                 f"runner counts no CPU time)")
    return line


def _eta(elapsed: float, before: StudyStatus, now: StudyStatus, todo: int) -> str:
    """The time left at this run's pace so far (both controllers', where two share the
    plan): each cell weighed by its estimated time where the table timed its approach (the
    cells of approaches not timed yet are named apart), else by the count of cells."""
    if before.pending_s and now.pending_s < before.pending_s:
        rate = elapsed / (before.pending_s - now.pending_s)  # seconds per estimated second
        untimed = f" and {now.untimed} cells not timed yet" if now.untimed else ""
        return f", eta {console.duration(rate * now.pending_s)}{untimed}"
    done = todo - now.pending  # cells stored since the run began, here or by another run
    return f", eta {console.duration(elapsed / done * now.pending)}" if done > 0 else ""


def scoring_cost(study: Study, sets: list[TestSet], limit: int | None = None,
                 earlier: Rows = ()) -> Callable[[Job], float]:
    """A cell's expected seconds, by its approach's pace on its set in the `earlier` table
    (`Pace`; `limit`: questions of a sample): what the ETA weighs cells by and the matrix
    balances its units by; the median of those timed for an approach the table has not
    timed."""
    pace = Pace.measured(study, current_rows(study, list(earlier)))
    expected = {(job.system_id, t.id): pace.scoring(job, t, limit)
                for job in study.trainings for t in sets}
    timed = [seconds for seconds in expected.values() if seconds]
    typical = median(timed) if timed else 1.0
    return lambda cell: expected.get((cell.bundle.id, cell.testset.id)) or typical


def score_systems(study: Study, sets: list[TestSet], runner: str, store: Store, *,
                  parallel: int = 2, limit: int | None = None, say: Say = lambda _: None,
                  earlier: Rows = ()) -> tuple[Evaluation, list[str]]:
    """Score the plan's frozen or stored systems on `sets` through the one evaluation entry
    (`api.evaluate`: stored cells are found, nothing is trained; `limit`: a seeded sample of
    each set), the ETA weighing each cell by its approach's pace in the `earlier` table;
    (the evaluation, the systems skipped as not trained)."""
    runnable, skipped = [], []
    for job in study.trainings:
        system = stored(job, store)
        if system is None:
            skipped.append(job)
        else:
            runnable.append((job, system.bundle))
    if not runnable:
        raise UserError(f"none of the {len(study.trainings)} systems chosen is frozen in the "
                        f"repository or trained in this store; `qashift systems` lists those "
                        f"that are")
    cost = scoring_cost(study, sets, limit, earlier)
    if limit:  # a sample is a first look: the quickest systems first, so that most of the
        # population is placed soonest and the ETA learns from them the start every run pays
        runnable.sort(key=lambda pair: sum(cost(Job(pair[1], t)) for t in sets))
    started = time.time()
    config = EvaluationConfig(bundles=tuple(b.id for _, b in runnable),
                              testsets=tuple(t.id for t in sets), runner=runner,
                              parallel=parallel, limit=limit)
    done = evaluation.evaluate(config, store, chosen=[b for _, b in runnable], progress=say,
                               cost=cost, longest_first=not limit)
    say(cost_line(done.report, prepared.made_since(store.workspace, started)))
    return done, [job.system_id for job in skipped]
