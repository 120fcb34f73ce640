"""Which cells of a matrix apply: each (bundle, test set) pair a job, or the reason it cannot
run (a predictions bundle without a file for that set, a bundle still awaiting its files)."""

from __future__ import annotations

from evaluator.bundles.spec import Bundle
from evaluator.core.errors import UserError
from evaluator.data.testsets import TestSet
from evaluator.jobs.job import Job


def plan(bundles: list[Bundle], testsets: list[TestSet], explicit: bool,
         options: dict | None = None, whole_if_covered: bool = True
         ) -> tuple[list[Job], list[tuple[str, str, str]]]:
    """Jobs to run and (bundle, testset, reason) for cells that cannot run.

    When the user named both the bundle and the test set (`explicit`), an inapplicable cell
    is an error; with `all` it is only listed. A sample (`limit`) of at least a set's size is
    that whole set: its cell is the full one, not a sample under another key (unless not
    `whole_if_covered`: `qashift check`'s sample never stands in for its cell).
    """
    jobs, skipped = [], []
    for bundle in bundles:
        for testset in testsets:
            reason = bundle.applicable(testset.id)
            if reason is None:
                jobs.append(Job(bundle, testset,
                                _options_for(testset, options or {}, whole_if_covered)))
            elif explicit:
                raise UserError(f"{bundle.id} cannot run on {testset.id}: {reason}")
            else:
                skipped.append((bundle.id, testset.id, reason))
    return jobs, skipped


def _options_for(testset: TestSet, options: dict, whole_if_covered: bool) -> dict:
    if whole_if_covered and options.get("limit") is not None and \
            int(options["limit"]) >= testset.questions:
        return {k: v for k, v in options.items() if k not in ("limit", "seed")}
    return dict(options)
