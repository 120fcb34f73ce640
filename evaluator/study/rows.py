"""A study's results table as rows: the store's rows of the plan's systems, merged with an
earlier table's rows that still describe the plan, so a study outlives the store (and the
machine) that ran part of it. Reading, writing and locking table files is `training.table`'s.
"""

from __future__ import annotations

from evaluator.api.results import Results
from evaluator.core.errors import UserError
from evaluator.data import testsets
from evaluator.store.store import Store
from evaluator.study.plan import Study
from evaluator.training import table
from evaluator.training.job import TrainJob
from evaluator.training.run import stored

Rows = list[dict]


def current_rows(study: Study, earlier: Rows) -> dict[str, Rows]:
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
    `current_rows` rows), with EM and F1 on every test set the plan scores them on: system ->
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
    """The test sets on which `rows` (one system's, from `current_rows`) hold both EM and F1,
    where given only for weights with that digest."""
    metrics: dict[str, set[str]] = {}
    for r in rows:
        if weights_digest is None or r["weights_digest"] == weights_digest:
            metrics.setdefault(r["testset"], set()).add(r["metric"])
    return {t for t, found in metrics.items() if {"em", "f1"} <= found}


def held_cells(study: Study, current: dict[str, Rows], job: TrainJob,
               weights_digest: str | None = None) -> set[str]:
    """Test sets of `job`'s system that an earlier table already scores (`current`, from
    `current_rows`): a plan that gains test sets, or a system retrained here, deterministically,
    to the weights the table names, scores only the others. Without `weights_digest`, those
    of the table's weights. A set that is the reference of one still to be scored is scored
    again, so that its per-question results are in the store beside the new set's (paired
    comparisons, e.g. `challenge report`, need both)."""
    held = _held_testsets(current.get(job.system_id, []), weights_digest)
    sets = study.testsets_for(job)
    return held - {t.reference for t in sets if t.id not in held}


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
               if (hit := stored(job, store, unpack=False)) is not None}
    wanted = {(job.system_id, t.id) for job in study.trainings for t in study.testsets_for(job)}
    families = {job.approach.id: job.approach.metadata.get("family")
                for job in study.trainings}
    references = {t.id: t.reference for t in study.testsets}
    trains = {t.id: t.train for t in study.testsets}
    today = {t.id: t.sha256 for t in study.testsets}
    fresh = [r for r in table.rows(store, Results(store, shas=today).rows(), references,
                                   families, trains)
             if current.get(r["model"]) == r["weights_digest"]
             and (r["model"], r["testset"]) in wanted
             and r["testset_sha256"] == today[r["testset"]]]  # not a result on older bytes
    earlier_rows = current_rows(study, list(earlier))
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
    return table.ordered(fresh + kept)


def beyond_plan(study: Study, written: Rows, earlier: Rows) -> Rows:
    """An earlier table's rows on test sets the plan does not list (a new set scored with
    `population --score`), of the plan's systems as it makes them now and of the weights the
    `written` rows name for them, on the bytes the set's folder names today (a set whose
    folder is gone keeps its rows): kept when the plan's table is written again."""
    listed = {t.id for t in study.testsets}
    keys = {job.system_id: job.key for job in study.trainings}
    weights = {r["model"]: r["weights_digest"] for r in written}
    mine = [r for r in earlier if r["testset"] not in listed and keys.get(r["model"]) ==
            r["train_key"] and weights.get(r["model"]) == r["weights_digest"]]
    today = {set_id: _sha256_today(set_id) for set_id in {r["testset"] for r in mine}}
    return [r for r in mine if today[r["testset"]] in (None, r["testset_sha256"])]


def _sha256_today(set_id: str) -> str | None:
    """The bytes a test-set folder names; None if no folder of that name can be read."""
    try:
        return testsets.get(set_id).sha256
    except UserError:
        return None
