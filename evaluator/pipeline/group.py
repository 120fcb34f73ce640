"""Several cells of one approach's systems on one test set, run in one process.

Scoring the frozen population repeats one start per system: an interpreter, torch, the
approach's libraries, its encoder. A runner that offers `run_many` (the local runner) runs the
systems of one approach on one input together, each by its own unchanged predict command;
every cell is still its own: its lease, its predictions scored and stored under its own key,
its own CPU seconds. A cell whose run does not end well in the group is handed back to be run
alone, which names its failure; nothing is lost to a neighbour's failure.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable
from pathlib import Path

from evaluator.core.errors import RunFailure, UserError
from evaluator.core.files import run_tempdir
from evaluator.core.hashing import canonical_json
from evaluator.jobs.job import Job
from evaluator.pipeline.cell import (
    CellResult,
    Heartbeat,
    claim,
    internal_failure,
    output_folder,
    record_failure,
    score_run,
    write_input,
)
from evaluator.pipeline.prepared import prepared_inputs
from evaluator.runners.base import RunRequest
from evaluator.stats import intervals
from evaluator.store.store import Store

MAX_SYSTEMS = 16  # cells in one group: a group's cells are reported when it ends


def group_key(job: Job, runner: object) -> Hashable | None:
    """What cells must share to run together: a trained system's approach (its folder,
    command, libraries, preparation, environment and limits), the test set and the options
    of the sample; None for a cell that runs alone (a submission, a runner that cannot)."""
    bundle = job.bundle
    can_group = getattr(runner, "can_group", None)
    if bundle.kind != "command" or bundle.system_key is None or can_group is None or \
            not can_group(bundle):
        return None
    return canonical_json([str(bundle.folder), bundle.command, bundle.prepare_command,
                           [str(lib) for lib in bundle.libraries], bundle.environment,
                           bundle.resources, job.testset.id, job.testset.sha256,
                           job.options]).decode()


def groups(jobs: list[Job], runner_for) -> list[list[Job]]:
    """`jobs` in units to run: groups of up to MAX_SYSTEMS cells that `group_key` joins, and
    single cells, each unit where its first cell was."""
    units: list[list[Job]] = []
    open_groups: dict[Hashable, list[Job]] = {}
    for job in jobs:
        key = group_key(job, runner_for(job.bundle))
        unit = open_groups.get(key) if key is not None else None
        if unit is not None and len(unit) < MAX_SYSTEMS:
            unit.append(job)
            continue
        units.append([job])
        if key is not None:
            open_groups[key] = units[-1]
    return units


def balanced(units: list[list[Job]], cost: Callable[[Job], float], parallel: int,
             longest_first: bool = True) -> list[list[Job]]:
    """`units` (`groups`) ready for `parallel` workers: a group expected (the sum of its
    cells' `cost`) to take over a share of the whole, 1 / (2 x parallel), is split into parts
    of near equal time, so that one group does not hold a core while the others idle; then
    the longest first (the longest-processing-time rule: a parallel run ends soonest when its
    long units do not start last; `longest_first=False` keeps the given order). One worker
    keeps the given order."""
    if parallel <= 1:
        return units
    share = sum(cost(job) for unit in units for job in unit) / (2 * parallel)
    split: list[list[Job]] = []
    for unit in units:
        count = math.ceil(sum(cost(job) for job in unit) / share) if share > 0 else 1
        parts: list[list[Job]] = [[] for _ in range(min(len(unit), max(1, count)))]
        for job in sorted(unit, key=cost, reverse=True):  # each to the lightest part
            min(parts, key=lambda part: sum(cost(j) for j in part)).append(job)
        place = {id(job): i for i, job in enumerate(unit)}
        split.extend(sorted(part, key=lambda job: place[id(job)]) for part in parts)
    if not longest_first:
        return split
    return sorted(split, key=lambda unit: -sum(cost(job) for job in unit))


class Grouped:
    """What became of a group's cells: results, failures (the cell's own, recorded),
    cells another controller holds, and cells to run alone."""

    def __init__(self):
        self.results: dict[int, CellResult] = {}
        self.failures: dict[int, UserError] = {}
        self.busy: list[Job] = []
        self.alone: list[Job] = []


def run_group(jobs: list[Job], runner, store: Store, *,
              level: float = intervals.DEFAULT_LEVEL, cluster: str | None = None,
              rerun: bool = False, device: str = "auto",
              mirrors: list[Path] | None = None, cpus: tuple[int, ...] = ()) -> Grouped:
    """Run the cells of one group (`groups`) that are not stored, together; keyed by
    `id(job)` in the outcome."""
    intervals.check_level(level)
    done, held = Grouped(), []
    for job in jobs:
        claimed = claim(job, store, level, cluster, rerun)
        if isinstance(claimed, CellResult):
            done.results[id(job)] = claimed
        elif claimed:
            held.append(job)
        else:
            done.busy.append(job)
    if len(held) < 2:  # nothing to share: the usual path
        for job in held:
            store.release(job.key)
        done.alone.extend(held)
        return done
    try:
        with Heartbeat(store, *(job.key for job in held)):
            _run_together(held, runner, store, done, level, cluster, device, mirrors, cpus)
    finally:
        for job in held:
            store.release(job.key)  # a no-op for those stored: put() released them
    return done


def _run_together(held: list[Job], runner, store: Store, done: Grouped, level: float,
                  cluster: str | None, device: str, mirrors: list[Path] | None,
                  cpus: tuple[int, ...]) -> None:
    started = time.time()
    first = held[0]
    dataset = first.dataset(mirrors)  # one test set and sample for the whole group
    with run_tempdir("group") as tmp:
        input_path = write_input(dataset, Path(tmp))
        try:
            prepared = prepared_inputs(first.bundle, input_path, runner, store.workspace,
                                       first.label)
        except RunFailure:
            done.alone.extend(held)  # each cell meets it again alone, and records it
            return
        outputs = output_folder(Path(tmp), "outputs")
        requests = [RunRequest(job.bundle, input_path, output_folder(outputs, str(i)),
                               job.testset.id, device, cpus, prepared)
                    for i, job in enumerate(held)]
        records = runner.run_many(requests)
        for job, request, record in zip(held, requests, records, strict=True):
            if record is None:
                done.alone.append(job)
                continue
            try:
                done.results[id(job)] = score_run(job, dataset, store, request, record,
                                                  started, level, cluster)
            except RunFailure as failure:
                record_failure(job, store, runner, failure)
                done.failures[id(job)] = failure
            except UserError as error:  # its data is unreadable: this cell's failure
                done.failures[id(job)] = error
            except Exception as exc:  # noqa: BLE001 - a bug or a hostile input: this cell
                done.failures[id(job)] = internal_failure(job, store, runner, exc)
