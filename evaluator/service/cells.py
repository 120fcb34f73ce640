"""What a job asks for, read one way for the worker that runs it and for the check of stale
results (`request`); and results gone stale: a finished job whose cell, planned today, has
another key than the result it ended with (its test set's bytes or its scorer's version
changed: the key holds both; a bundle is named by its id or by its upload, whose bytes do
not change). `qashift admin rerun --stale` asks for exactly those cells again, as new jobs
of the same submissions; the old results stay in the store, under their own keys."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import Engine

from evaluator.api.evaluation import EvaluationConfig, resolve
from evaluator.bundles import spec as bundles
from evaluator.bundles.spec import Bundle
from evaluator.core.errors import UserError
from evaluator.data import testsets
from evaluator.data.testsets import TestSet
from evaluator.jobs.job import Job
from evaluator.pipeline.cell import stored_result
from evaluator.service import boards, queue
from evaluator.store.store import Store
from evaluator.store.units import load_units


def request(row: dict, store: Store, runner: str = "auto"
            ) -> tuple[EvaluationConfig, list[Bundle]]:
    """The evaluation a job (a row of the jobs table, or a claimed job's fields) asks for: its
    config (its cell's sample options only) and its bundle, resolved today (an upload from its
    folder). A bundle that no longer resolves is a UserError."""
    given = json.loads(row["options"]) if isinstance(row["options"], str) else row["options"]
    options = {k: v for k, v in given.items() if k in ("limit", "seed")}
    config = EvaluationConfig(bundles=(row["bundle"],), testsets=(row["testset"],),
                              runner=runner, **options)
    chosen = [bundles.from_folder(Path(row["folder"]))] if row["folder"] else \
        resolve(config, store)
    return config, chosen


def job_result(job: dict, store: Store) -> tuple[dict | None, dict | None]:
    """A job's stored result row and its result as `evaluate --json` prints it, less the
    predictions' path on the server's disk; (None, None) while it has none."""
    row = store.get(job["result_key"]) if job["result_key"] else None
    if row is None:
        return None, None
    result = stored_result(store, row).to_dict()
    result.pop("predictions")
    return row, result


def shown_result(engine: Engine, job: dict, store: Store, admin: bool) -> dict:
    """A job's result as a reader sees it: `{"result"}`, or, while its set's rules withhold
    it from a submitter, `{"result": None, "result_hidden": why}` (the API and webhooks)."""
    rules = boards.rules_of(engine, job["testset"])
    if rules.shown_to(admin):
        return {"result": job_result(job, store)[1]}
    return {"result": None, "result_hidden": boards.withheld_line(rules)}


def samples(row: dict, store: Store, testset: TestSet | None = None) -> list[dict]:
    """A stored result's questions one by one: the prediction, the gold answers and the
    question's EM and F1 (`testset`: a hidden set, read where its gold is; else the
    registry's)."""
    testset = testset or testsets.get(row["testset"])
    gold = {q.id: list(q.answers) for q in testset.load().questions}
    predictions = json.loads(store.get_object(row["predictions_sha256"]) or b"{}")
    return [{"id": u.id, "prediction": predictions.get(u.id), "answers": gold.get(u.id),
             "em": u.em, "f1": u.f1} for u in load_units(store, row)]


def todays_cell(engine: Engine, row: dict, store: Store) -> Job | None:
    """The cell a job asks for, as it is planned today (`boards.plan`); None when it applies
    no more."""
    config, chosen = request(row, store)
    cells, _ = boards.plan(engine, config, chosen)
    return cells[0] if cells else None


@dataclass
class Staleness:
    stale: list[dict]  # finished jobs whose result is not today's cell's
    unplannable: list[tuple[dict, str]]  # finished jobs whose cell cannot be planned now: why
    cells: dict[int, Job] = field(default_factory=dict)  # a stale job's id: its cell today


def stale_jobs(engine: Engine, store: Store, among: list[dict] | None = None) -> Staleness:
    """The finished jobs (of `among`, default every job) whose results are stale: of each
    cell of a submission, its newest job only, and only once that has finished (a cell a
    re-run already asks for again is not stale twice)."""
    found = Staleness([], [])
    newest: dict[tuple, dict] = {}
    for row in queue.every_job(engine) if among is None else among:
        newest[row["submission"], row["bundle"], row["folder"], row["testset"],
               row["options"]] = row
    for row in (r for r in newest.values() if r["state"] == "finished"):
        try:
            cell = todays_cell(engine, row, store)
        except UserError as error:
            found.unplannable.append((row, str(error)))
            continue
        if cell is None:
            found.unplannable.append((row, "it applies no more"))
        elif cell.key != row["result_key"]:
            found.stale.append(row)
            found.cells[row["id"]] = cell
    return found


def rerun_stale(engine: Engine, store: Store) -> tuple[list[int], Staleness]:
    """Queue the stale jobs' cells again (`queue.requeue`), a hidden set's with its input as
    it is now; the new jobs' ids."""
    found = stale_jobs(engine, store)
    blind = {row["id"]: (boards.blind_input(found.cells[row["id"]], store),
                         found.cells[row["id"]].key)
             for row in found.stale if row["input_sha256"]}
    return queue.requeue(engine, found.stale, "re-run: its result is stale", blind), found
