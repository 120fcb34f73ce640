"""The state of every cell of a matrix, from the store alone: done, running, failed, pending
or not applicable. Job keys are not recomputed, so a status never downloads or derives data."""

from __future__ import annotations

from dataclasses import dataclass

from evaluator.bundles.spec import Bundle
from evaluator.data.testsets import TestSet
from evaluator.store.queries import Cell, latest_failures
from evaluator.store.store import Store

STATES = ("done", "running", "failed", "pending", "n/a")


@dataclass(frozen=True)
class CellStatus:
    bundle: str
    testset: str
    state: str  # one of STATES
    row: dict | None = None  # the latest valid result, when done
    failure_class: str | None = None  # the last failure's class, when failed


def matrix_status(store: Store, bundles: list[Bundle], testsets: list[TestSet],
                  done: dict[Cell, dict]) -> list[CellStatus]:
    """One CellStatus per (bundle, test set), bundles outer; `done` is every cell's result
    as it is today (`api.Results`)."""
    have = store.exists()
    running = {(lease["bundle"], lease["testset"]) for lease in store.live_leases()} \
        if have else set()
    failures = {cell: f["failure_class"]  # a failed --limit sample is not the cell's state
                for cell, f in latest_failures(store.failures() if have else []).items()}
    out = []
    for bundle in bundles:
        for testset in testsets:
            cell = (bundle.id, testset.id)
            if bundle.applicable(testset.id) is not None:
                out.append(CellStatus(*cell, "n/a"))
            elif cell in done:
                out.append(CellStatus(*cell, "done", row=done[cell]))
            elif cell in running:
                out.append(CellStatus(*cell, "running"))
            elif cell in failures:
                out.append(CellStatus(*cell, "failed", failure_class=failures[cell]))
            else:
                out.append(CellStatus(*cell, "pending"))
    return out
