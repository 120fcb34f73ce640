"""Plan and run a matrix of cells: which (bundle, test set) pairs apply, in what order.

Each cell ends in one of three outcomes: a result, a failure (with its class), or not
applicable. One cell's failure never stops the others.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from evaluator.core import console
from evaluator.core.errors import UserError, failure_class_of
from evaluator.jobs.job import Job
from evaluator.pipeline.cell import CellBusy, CellResult, cpu_seconds, evaluate
from evaluator.runners.dispatch import Dispatcher
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
        outcome.result = evaluate(job, runner.runner_for(job.bundle), store, **options)
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


def _time_left(pace: float, waiting: list[float], running: list[tuple[float, float]],
               parallel: int) -> float:
    """Seconds until the last cell ends: `pace` seconds per unit of cost (measured on the
    cells that ended), the waiting cells' costs, and each running cell's cost and seconds so
    far, shared among the `parallel` workers."""
    work = pace * sum(waiting) + sum(max(pace * c - ran, 0.0) for c, ran in running)
    return work / max(1, min(parallel, len(waiting) + len(running)))


def run(jobs: list[Job], runner: Dispatcher, store: Store, *, parallel: int = 1,
        progress: Callable[[str], None] = lambda _: None, poll_seconds: float = 1.0,
        wait_for_busy: bool = True, ended: Callable[[Outcome], None] = lambda _: None,
        cost: Callable[[Job], float] = lambda _: 1.0, **options) -> MatrixReport:
    """Run every cell, `parallel` at a time, each on its own slice of this host's cores
    (`cpu_slots`); cells busy in another controller are retried until that controller
    finishes them (or dies and its lease lapses), or with `wait_for_busy=False` left to it
    (listed in `busy`). `ended` hears of each cell's outcome as it ends, in this thread;
    `cost` is a cell's expected time relative to the others, which the ETA weighs cells by
    (cells of a population differ a hundredfold; by default all are alike)."""
    report = MatrixReport()
    costs = {id(job): cost(job) for job in jobs}
    done_cost = spent = 0.0  # the cost and the seconds of the cells that ran to an end
    for job in jobs:  # made here, in the main thread, where runners install signal handlers
        runner.runner_for(job.bundle)
    pending = list(jobs)
    running: dict[Future, Job] = {}
    slots = cpu_slots(parallel)
    holding: dict[Future, int] = {}  # the slot of cores each running cell holds
    began: dict[Future, float] = {}
    pool = ThreadPoolExecutor(max_workers=max(1, parallel))
    try:
        while pending or running:
            while pending and len(running) < max(1, parallel):
                job = pending.pop(0)
                slot = min(set(range(len(slots))) - set(holding.values()), default=0)
                cell_options = {**options, "cpus": slots[slot]} if slots else options
                future = pool.submit(_attempt, job, runner, store, cell_options)
                running[future], holding[future] = job, slot
                began[future] = time.perf_counter()
            # a timeout keeps the main thread responsive to Ctrl-C while cells run
            finished, _ = wait(running, timeout=1.0, return_when=FIRST_COMPLETED)
            busy = []
            for future in finished:
                job = running.pop(future)
                holding.pop(future)
                seconds = time.perf_counter() - began.pop(future)
                outcome = future.result()
                if outcome is None:
                    busy.append(job)
                    continue
                report.outcomes.append(outcome)
                done = len(report.outcomes)
                if outcome.result is None or not outcome.result.cached:  # found: no time
                    done_cost += costs[id(job)]
                    spent += seconds
                status = "ok" if outcome.result else f"FAILED ({outcome.failure_class})"
                eta = console.duration(_time_left(
                    spent / done_cost, [costs[id(j)] for j in [*pending, *busy]],
                    [(costs[id(j)], time.perf_counter() - began[f]) for f, j in running.items()],
                    parallel)) if done_cost else "-"
                progress(f"[{done}/{len(jobs)}] {job.label}: {status} | running "
                         f"{len(running)}, failed {len(report.failed)}, eta {eta}")
                if outcome.result is None:
                    progress(f"    {outcome.message}")
                ended(outcome)
            if busy and not wait_for_busy:
                report.busy.extend(busy)
            elif busy:
                pending.extend(busy)
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
