"""Plan and run a matrix of cells: which (bundle, test set) pairs apply, in what order.

Each cell ends in one of three outcomes: a result, a failure (with its class), or not
applicable. One cell's failure never stops the others.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from evaluator.bundles import Bundle
from evaluator.errors import RunFailure, UserError
from evaluator.jobs import Job
from evaluator.pipeline import CellResult, evaluate
from evaluator.runners.base import Runner
from evaluator.store import Store
from evaluator.testsets import TestSet


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

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.result is None]


def plan(bundles: list[Bundle], testsets: list[TestSet], explicit: bool,
         options: dict | None = None) -> tuple[list[Job], list[tuple[str, str, str]]]:
    """Jobs to run and (bundle, testset, reason) for cells that cannot run.

    When the user named both the bundle and the test set (`explicit`), an inapplicable cell
    is an error; with `all` it is only listed.
    """
    jobs, skipped = [], []
    for bundle in bundles:
        for testset in testsets:
            reason = bundle.applicable(testset.id)
            if reason is None:
                jobs.append(Job(bundle, testset, dict(options or {})))
            elif explicit:
                raise UserError(f"{bundle.id} cannot run on {testset.id}: {reason}")
            else:
                skipped.append((bundle.id, testset.id, reason))
    return jobs, skipped


def runner_for(bundle: Bundle, runner: Runner) -> Runner:
    if bundle.kind == "predictions":
        from evaluator.runners.frozen import FrozenRunner

        return FrozenRunner()
    return runner


def run(jobs: list[Job], runner: Runner, store: Store, *,
        progress: Callable[[str], None] = lambda _: None, **options) -> MatrixReport:
    report = MatrixReport()
    start = time.perf_counter()
    for i, job in enumerate(jobs, 1):
        progress(f"[{i}/{len(jobs)}] {job.label}")
        outcome = Outcome(job)
        try:
            outcome.result = evaluate(job, runner_for(job.bundle, runner), store, **options)
        except RunFailure as failure:
            outcome.failure_class, outcome.message = failure.failure_class, str(failure)
        except UserError as error:  # e.g. data missing for this test set
            outcome.failure_class, outcome.message = "data-unavailable", str(error)
        report.outcomes.append(outcome)
        if outcome.result is None:
            progress(f"    failed ({outcome.failure_class}): {outcome.message}")
        elapsed = time.perf_counter() - start
        if i < len(jobs):
            eta = elapsed / i * (len(jobs) - i)
            progress(f"    done {i}, failed {len(report.failed)}, eta {eta:.0f} s")
    return report
