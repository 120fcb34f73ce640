"""Plan and run a matrix of cells: which (bundle, test set) pairs apply, in what order.

Each cell ends in one of three outcomes: a result, a failure (with its class), or not
applicable. One cell's failure never stops the others.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from evaluator.core import console
from evaluator.core.errors import UserError, failure_class_of
from evaluator.core.files import run_tempdir
from evaluator.core.hashing import canonical_json
from evaluator.jobs.job import Job
from evaluator.pipeline.cell import (
    CellBusy,
    CellResult,
    cached_result,
    cpu_seconds,
    run_cell,
    write_input,
)
from evaluator.pipeline.group import balanced, groups, run_group
from evaluator.pipeline.prepared import prepared_inputs
from evaluator.runners.dispatch import Dispatcher
from evaluator.stats import intervals
from evaluator.store.store import Store, StoreError


@dataclass
class Outcome:
    job: Job
    result: CellResult | None = None
    failure_class: str | None = None
    message: str | None = None


@dataclass
class MatrixReport:
    outcomes: list[Outcome] = field(default_factory=list)
    not_applicable: list[tuple[str, str, str]] = field(default_factory=list)
    busy: list[Job] = field(default_factory=list)  # left to the controller running them

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.result is None]

    def cpu_seconds(self) -> tuple[float, int, int]:
        """(CPU seconds, cells counted, cells uncounted) of the cells this run scored (not
        those found stored), as their runners counted them (`RunRecord.cpu_s`)."""
        counts = [cpu_seconds(o.result.row) for o in self.outcomes
                  if o.result is not None and not o.result.cached]
        known = [c for c in counts if c is not None]
        return sum(known), len(known), len(counts) - len(known)


def _attempt(job: Job, runner: Dispatcher, store: Store, options: dict) -> Outcome | None:
    """One try at a cell: an outcome, or None when another controller is running it."""
    outcome = Outcome(job)
    try:
        outcome.result = run_cell(job, runner.runner_for(job.bundle), store, **options)
    except CellBusy:
        return None
    except StoreError:
        raise  # the store itself failed: every cell would; stop with its one-line error
    except UserError as error:  # a run's failure, unreadable data, a rejected job
        outcome.failure_class, outcome.message = failure_class_of(error), str(error)
    except Exception as error:  # noqa: BLE001 - one cell's bug never stops the matrix
        outcome.failure_class = "internal-error"
        outcome.message = f"{type(error).__name__}: {str(error)[:300]}"
    return outcome


def cpu_slots(parallel: int) -> list[tuple[int, ...]]:
    """The cores of this host's share that each of `parallel` cells at once may use: disjoint
    equal slices of this process's CPUs (shared round-robin when cells outnumber cores), so
    that predictors which start a thread per visible core do not oversubscribe the machine.
    None ([]) for one cell at a time: it may use them all."""
    cores = sorted(os.sched_getaffinity(0))
    if parallel <= 1:
        return []
    width = max(1, len(cores) // parallel)
    return [tuple(cores[(slot * width + i) % len(cores)] for i in range(width))
            for slot in range(parallel)]


SPREAD = 4.0  # costs this far apart tell a unit's start from its scale
SCALES = (0.5, 2.0)  # how far this run's pace may stray from the costs' seconds
QUIET_SECONDS = 3.0  # a run says what it started once it has run this long without an end


def pace(observed: list[tuple[float, float]]) -> tuple[float, float]:
    """(start, scale) of a unit's seconds = start + scale * cost, from the (cost, seconds) of
    the units that ran to an end. Every run pays a start (an interpreter, its libraries: a few
    seconds whatever the approach) beside its cost. Until the costs seen spread over a factor
    of SPREAD, they are taken as the seconds they claim and what units took beyond them is
    the start (or, where they took less, the costs are scaled down and there is no start);
    then both are fitted (least squares, the scale held within SCALES, the start not below
    zero), as a few noisy seconds of units alike would otherwise tilt the line anywhere."""
    if not observed:
        return 0.0, 1.0
    xs, ys = [x for x, _ in observed], [y for _, y in observed]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    if min(xs) <= 0 or max(xs) < SPREAD * min(xs):
        return (mean_y - mean_x, 1.0) if mean_y >= mean_x else \
            (0.0, mean_y / mean_x if mean_x else 1.0)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in observed) / \
        sum((x - mean_x) ** 2 for x in xs)
    scale = min(max(slope, SCALES[0]), SCALES[1])
    return max(mean_y - scale * mean_x, 0.0), scale


def _time_left(start: float, scale: float, waiting: list[float],
               running: list[tuple[float, float]], parallel: int) -> float:
    """Seconds until the last unit ends: each unit's start and scaled cost (`pace`) for the
    waiting units, and for each running one its expected seconds less those it has run,
    shared among the `parallel` workers."""
    work = sum(start + scale * c for c in waiting) + \
        sum(max(start + scale * c - ran, 0.0) for c, ran in running)
    return work / max(1, min(parallel, len(waiting) + len(running)))


def prepare_first(jobs: list[Job], runner: Dispatcher, store: Store, *, rerun: bool = False,
                  mirrors: list[Path] | None = None, parallel: int = 1,
                  say: Callable[[str], None] = lambda _: None) -> None:
    """Make, before any cell runs, each prepared input (`pipeline.prepared`) that the cells
    to run will ask for, `parallel` at once: the minutes of a set's parsing then never fall
    inside one cell's time, where they would hold a worker and throw the ETA off. A
    preparation that fails is left to its cells, which record the failure."""
    wanted: dict[str, Job] = {}
    for job in jobs:
        if not job.bundle.prepare_command or (not rerun and store.get(job.key) is not None):
            continue
        identity = canonical_json([job.bundle.prepare_command, job.bundle.environment,
                                   [str(lib) for lib in job.bundle.libraries],
                                   getattr(runner.runner_for(job.bundle), "name", ""),
                                   job.testset.id, job.testset.sha256, job.options]).decode()
        wanted.setdefault(identity, job)

    def prepare(job: Job) -> None:
        say(f"preparing the input of {job.label} (shared by every system of its approach)")
        with run_tempdir("prepare-first") as tmp:
            try:
                input_path = write_input(job.dataset(mirrors), Path(tmp))
                prepared_inputs(job.bundle, input_path, runner.runner_for(job.bundle),
                                store.workspace, job.label)
            except UserError:
                pass  # its cells meet it again, and record it

    if len(wanted) > 1 and parallel > 1:
        with ThreadPoolExecutor(max_workers=min(parallel, len(wanted))) as pool:
            list(pool.map(prepare, wanted.values()))
    else:
        for job in wanted.values():
            prepare(job)


def _attempt_unit(unit: list[Job], runner: Dispatcher, store: Store, options: dict
                  ) -> list[Outcome | None]:
    """One try at a unit of `group.groups`: an outcome per cell, None for one that another
    controller is running. A group's cells that did not end in it are tried alone."""
    if len(unit) == 1:
        return [_attempt(unit[0], runner, store, options)]
    try:
        grouped = run_group(unit, runner.runner_for(unit[0].bundle), store, **options)
    except StoreError:
        raise
    except Exception:  # noqa: BLE001 - whatever stopped the group, each cell alone names it
        return [_attempt(job, runner, store, options) for job in unit]
    busy = {id(job) for job in grouped.busy}
    outcomes: list[Outcome | None] = []
    for job in unit:
        if id(job) in grouped.results:
            outcomes.append(Outcome(job, result=grouped.results[id(job)]))
        elif id(job) in grouped.failures:
            error = grouped.failures[id(job)]
            outcomes.append(Outcome(job, failure_class=failure_class_of(error),
                                    message=str(error)))
        elif id(job) in busy:
            outcomes.append(None)
        else:
            outcomes.append(_attempt(job, runner, store, options))
    return outcomes


def run(jobs: list[Job], runner: Dispatcher, store: Store, *, parallel: int = 1,
        progress: Callable[[str], None] = lambda _: None, poll_seconds: float = 1.0,
        wait_for_busy: bool = True, ended: Callable[[Outcome], None] = lambda _: None,
        cost: Callable[[Job], float] = lambda _: 1.0, together: bool = True,
        longest_first: bool = True, started: Callable[[str], None] = lambda _: None,
        **options) -> MatrixReport:
    """Run every cell, `parallel` units at a time, each on its own slice of this host's
    cores (`cpu_slots`); a unit is one cell, or the cells of one approach's systems on one
    set that the runner can run in one process (`group.groups`). Cells busy in another
    controller are retried until that controller finishes them (or dies and its lease
    lapses), or with `wait_for_busy=False` left to it (listed in `busy`). `ended` hears of
    each cell's outcome as it ends, in this thread; `cost` is a cell's expected time relative
    to the others, which the ETA weighs cells by and by which units are split and, unless
    not `longest_first`, run longest first when several run at once (`group.balanced`; cells
    of a population differ a hundredfold; by default all are alike). `together=False` runs
    every cell alone (the baseline a benchmark measures groups against). `started` hears of
    the cells left to run once they have run QUIET_SECONDS with none ended: a long run is
    never silent, and a quick one (or its one-line error) is not preceded by a line."""
    report = MatrixReport()
    costs = {id(job): cost(job) for job in jobs}
    for job in jobs:  # made here, in the main thread, where runners install signal handlers
        runner.runner_for(job.bundle)
    left = []
    for job in jobs:  # stored cells are found here, with no worker's round trip
        hit = None if options.get("rerun") else cached_result(
            store, job, options.get("level", intervals.DEFAULT_LEVEL), options.get("cluster"))
        if hit is None:
            left.append(job)
            continue
        report.outcomes.append(Outcome(job, result=hit))
        progress(f"[{len(report.outcomes)}/{len(jobs)}] {job.label}: ok (stored) | running "
                 f"0, failed 0, eta -")  # found cells say nothing of the time left
        ended(report.outcomes[-1])
    stored = f" ({len(jobs) - len(left)} found stored)" if len(left) < len(jobs) else ""
    said = threading.Timer(QUIET_SECONDS, started, [
        f"running {left[0].label}" if len(left) == 1 else
        f"running {len(left)} cells{stored}, {max(1, parallel)} at a time"])
    said.daemon = True
    if left:
        said.start()

    def on_end(outcome: Outcome) -> None:  # the first result says enough
        said.cancel()
        ended(outcome)

    try:
        return _run_left(jobs, left, report, runner, store, parallel=parallel,
                         progress=progress, poll_seconds=poll_seconds,
                         wait_for_busy=wait_for_busy, ended=on_end, costs=costs,
                         together=together, longest_first=longest_first, options=options)
    finally:
        said.cancel()


def _run_left(jobs: list[Job], left: list[Job], report: MatrixReport, runner: Dispatcher,
              store: Store, *, parallel: int, progress: Callable[[str], None],
              poll_seconds: float, wait_for_busy: bool, ended: Callable[[Outcome], None],
              costs: dict[int, float], together: bool, longest_first: bool,
              options: dict) -> MatrixReport:
    """`run`'s cells left to run (`left`, of `jobs`): prepared first, then run in units."""
    observed: list[tuple[float, float]] = []  # (cost, seconds) of units that ran to an end
    prepare_first(left, runner, store, rerun=bool(options.get("rerun")),
                  mirrors=options.get("mirrors"), parallel=parallel, say=progress)
    pending = balanced(groups(left, runner.runner_for) if together else
                       [[job] for job in left], lambda job: costs[id(job)], parallel,
                       longest_first)
    running: dict[Future, list[Job]] = {}
    slots = cpu_slots(parallel)
    holding: dict[Future, int] = {}  # the slot of cores each running unit holds
    began: dict[Future, float] = {}

    def unit_cost(unit: list[Job]) -> float:
        return sum(costs[id(job)] for job in unit)

    pool = ThreadPoolExecutor(max_workers=max(1, parallel))
    try:
        while pending or running:
            while pending and len(running) < max(1, parallel):
                unit = pending.pop(0)
                slot = min(set(range(len(slots))) - set(holding.values()), default=0)
                cell_options = {**options, "cpus": slots[slot]} if slots else options
                future = pool.submit(_attempt_unit, unit, runner, store, cell_options)
                running[future], holding[future] = unit, slot
                began[future] = time.perf_counter()
            # a timeout keeps the main thread responsive to Ctrl-C while cells run
            finished, _ = wait(running, timeout=1.0, return_when=FIRST_COMPLETED)
            busy: list[Job] = []
            for future in finished:
                unit = running.pop(future)
                holding.pop(future)
                seconds = time.perf_counter() - began.pop(future)
                outcomes = future.result()
                ran = [job for job, outcome in zip(unit, outcomes, strict=True)
                       if outcome is not None and
                       (outcome.result is None or not outcome.result.cached)]
                if ran:  # found cells took no time
                    observed.append((unit_cost(ran), seconds))
                start, scale = pace(observed)
                for job, outcome in zip(unit, outcomes, strict=True):
                    if outcome is None:
                        busy.append(job)
                        continue
                    report.outcomes.append(outcome)
                    status = "ok" if outcome.result else f"FAILED ({outcome.failure_class})"
                    eta = console.duration(_time_left(
                        start, scale, [unit_cost(u) for u in pending] +
                        [costs[id(j)] for j in busy],
                        [(unit_cost(u), time.perf_counter() - began[f])
                         for f, u in running.items()], parallel)) if observed else "-"
                    progress(f"[{len(report.outcomes)}/{len(jobs)}] {job.label}: {status} | "
                             f"running {sum(map(len, running.values()))}, failed "
                             f"{len(report.failed)}, eta {eta}")
                    if outcome.result is None:
                        progress(f"    {outcome.message}")
                    ended(outcome)
            if busy and not wait_for_busy:
                report.busy.extend(busy)
            elif busy:
                pending.extend([job] for job in busy)
                if not running and len(busy) == len(pending):
                    time.sleep(poll_seconds)  # everything left is held elsewhere: wait
    except KeyboardInterrupt:
        cancel = getattr(runner, "cancel", None)
        if cancel is not None:
            cancel()  # stop this controller's containers or jobs, and only those
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    order = {id(j): i for i, j in enumerate(jobs)}
    report.outcomes.sort(key=lambda o: order[id(o.job)])
    return report
