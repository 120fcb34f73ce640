"""The service's test sets: the registry's, each with the rules the organiser set for it, and
hidden sets whose gold answers only the scoring process reads.

`qashift admin testset add FOLDER --hidden` copies a test-set folder (its own data file:
`file:`) into the service's hidden folder, which no worker, runner or page reads: a job on a
hidden set carries its answer-free input (a store object made here), its worker hands the
run back, and the server scores it (`pipeline.blind`). A set's rules: its leaderboard's
visibility (public; after a date; admins only), its own daily limit of submissions a user
may make to it, and, for a hidden set, whether its inputs may leave the service (to an
endpoint bundle's server). Every plan of a submission's cells goes through `plan`, so that a
submission, a worker's re-plan and the check of stale results see the same cells.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Engine, insert, select, update

from evaluator.api.evaluation import EvaluationConfig, plan_cells
from evaluator.bundles.spec import Bundle
from evaluator.core.errors import UserError
from evaluator.core.hashing import canonical_json
from evaluator.data import testsets
from evaluator.data.testsets import TestSet, input_document
from evaluator.jobs.job import Job
from evaluator.jobs.plan import plan as plan_jobs
from evaluator.service.db import testset_rules
from evaluator.store.store import Store

VISIBILITIES = ("public", "after", "admins")
HIDDEN_FOLDER = "hidden-testsets"  # in the server's workspace, beside the store


@dataclass(frozen=True)
class Rules:
    testset: str
    hidden: bool = False
    folder: str | None = None
    inputs_may_leave: bool = False
    visibility: str = "public"
    visible_after: float | None = None
    daily_limit: int | None = None

    def shown_to(self, admin: bool, now: float | None = None) -> bool:
        """Whether the set's results are shown to a submitter (admins see every set)."""
        if admin or self.visibility == "public":
            return True
        if self.visibility == "after":
            return (time.time() if now is None else now) >= (self.visible_after or 0.0)
        return False

    def read(self) -> TestSet:
        """A hidden set as its folder holds it (its gold is read only where it is scored)."""
        return testsets.from_folder(Path(self.folder))


def withheld_line(rules: Rules) -> str:
    """Why a set's results are not shown to a submitter, in one line."""
    if rules.visibility == "after":
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(rules.visible_after or 0))
        return f"results on test set {rules.testset!r} are shown from {when}"
    return f"results on test set {rules.testset!r} are shown to its organisers only"


def withheld(engine: Engine, now: float | None = None) -> dict[str, str]:
    """The test sets whose results a submitter is not shown now, and why (public pages and a
    submission's page leave them out)."""
    return {t: withheld_line(r) for t, r in rules(engine).items()
            if not r.shown_to(False, now)}


def rules(engine: Engine) -> dict[str, Rules]:
    """Every test set's rules the organiser set ({} for a set without any: public)."""
    with engine.connect() as conn:
        rows = conn.execute(select(testset_rules)).mappings().all()
    return {r["testset"]: Rules(r["testset"], bool(r["hidden"]), r["folder"],
                                bool(r["inputs_may_leave"]), r["visibility"],
                                r["visible_after"], r["daily_limit"]) for r in rows}


def rules_of(engine: Engine, testset: str) -> Rules:
    return rules(engine).get(testset, Rules(testset))


def _save(engine: Engine, testset: str, **values) -> None:
    with engine.begin() as conn:
        found = conn.execute(select(testset_rules.c.testset)
                             .where(testset_rules.c.testset == testset)).first()
        values["updated_at"] = time.time()
        if found:
            conn.execute(update(testset_rules).where(testset_rules.c.testset == testset)
                         .values(**values))
        else:
            conn.execute(insert(testset_rules).values(testset=testset, **values))


def add_hidden(engine: Engine, folder: Path, workspace: Path, *,
               inputs_may_leave: bool = False) -> TestSet:
    """Copy the test set in `folder` into the service's hidden folder and mark it hidden
    (again: its data replaced, so that its results show as stale); the set as read there."""
    found = testsets.from_folder(Path(folder))  # checked as any test-set folder is
    if found.data_file is None:
        raise UserError(f"test set {found.id!r}: a hidden set keeps its data in its folder "
                        f"(file: NAME), not fetched or derived from data workers can read")
    if found.id in testsets.available():
        raise UserError(f"test set {found.id!r} is in the registry workers read: a hidden "
                        f"set needs an id of its own")
    root = workspace / HIDDEN_FOLDER
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    root.chmod(0o700)
    target = root / found.id
    staging = root / ".staging" / found.id
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(mode=0o700, parents=True)
    for name in ("testset.yaml", found.data_file):
        shutil.copyfile(Path(folder) / name, staging / name)
    hidden = testsets.from_folder(staging)
    hidden.load(keep=False)  # its data checked before it replaces the set in force
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)
    _save(engine, found.id, hidden=1, folder=str(target),
          inputs_may_leave=int(inputs_may_leave))
    return testsets.from_folder(target)


def set_rules(engine: Engine, testset: str, *, visibility: str | None = None,
              visible_after: float | None = None, daily_limit: int | None = None,
              inputs_may_leave: bool | None = None) -> Rules:
    """Change a set's rules (a registry set or a hidden one); the rules now."""
    if testset not in testsets.available() and not rules_of(engine, testset).hidden:
        raise UserError(f"unknown test set {testset!r}")
    values: dict = {}
    if visibility is not None:
        if visibility not in VISIBILITIES:
            raise UserError(f"visibility {visibility!r}: one of {', '.join(VISIBILITIES)}")
        if visibility == "after" and visible_after is None:
            raise UserError("visibility 'after' needs the date its results are shown")
        values.update(visibility=visibility, visible_after=visible_after)
    if daily_limit is not None:
        values["daily_limit"] = daily_limit
    if inputs_may_leave is not None:
        values["inputs_may_leave"] = int(inputs_may_leave)
    if values:
        _save(engine, testset, **values)
    return rules_of(engine, testset)


def hidden_set(engine: Engine, testset: str) -> TestSet | None:
    """A hidden set, read from its folder in the server's workspace (None for a set that is
    not hidden)."""
    found = rules_of(engine, testset)
    return found.read() if found.hidden else None


def endpoint_bundle(bundle: Bundle) -> bool:
    """Whether a bundle sends its inputs to a server outside the service."""
    return bundle.kind == "generative" and bool(bundle.generative.get("endpoint"))


def plan(engine: Engine, config: EvaluationConfig, chosen: list[Bundle]
         ) -> tuple[list[Job], list[tuple[str, str, str]]]:
    """The cells of `chosen` x the config's test sets, as `api.evaluation.plan_cells` plans
    them, a hidden set's read from its folder; an endpoint bundle on a hidden set whose
    inputs may not leave is a UserError."""
    known = rules(engine)
    if not any(known.get(n, Rules(n)).hidden for n in config.testsets):
        return plan_cells(config, chosen)
    sets = []
    for name in config.testsets:
        found = known.get(name)
        sets.append(found.read() if found and found.hidden else testsets.get(name))
    for bundle in chosen:
        for testset in sets:
            found = known.get(testset.id)
            if found and found.hidden and not found.inputs_may_leave and \
                    endpoint_bundle(bundle):
                raise UserError(f"{bundle.id} sends its inputs to an endpoint; the inputs of "
                                f"hidden test set {testset.id!r} may not leave the service")
    return plan_jobs(chosen, sets, True, config.sample, whole_if_covered=True)


def blind_input(job: Job, store: Store) -> str:
    """The answer-free input of a hidden set's cell, stored: its object's sha256."""
    return store.put_object(canonical_json(input_document(job.dataset().raw)))
