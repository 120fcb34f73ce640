"""The jobs table is the queue: no broker, one row per job, one source of truth.

A job is one cell (bundle x test set, with its options) asked for by a user; a submission is
the jobs asked for together. A job on a hidden test set carries its answer-free input: its
worker hands the run back (running -> scoring) and the server, where the gold is, scores it
and ends the job (`pipeline.blind`). A worker claims a job in one atomic update (on PostgreSQL the
row is taken with FOR UPDATE SKIP LOCKED; on SQLite the write lock is taken when the
transaction begins) and holds it by a lease that its heartbeat renews; a job whose lease
lapsed (its worker killed, its host lost) is claimed again, its attempts counted. A state
only moves forward: queued -> running [-> scoring] -> finished | failed | cancelled, and
every change is kept in the job's history with its time and worker. A worker that lost its
lease cannot finish the job (its update names it as the holder and finds nothing), so a job
ends once.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, and_, case, func, insert, or_, select, update

from evaluator.service.db import deliveries, events, jobs, users, webhooks

STATES = ("queued", "running", "scoring", "finished", "failed", "cancelled")
ENDED = ("finished", "failed", "cancelled")
LEASE_SECONDS = 60.0


@dataclass(frozen=True)
class Claimed:
    id: int
    bundle: str
    testset: str
    options: dict
    attempt: int
    folder: str | None = None  # an uploaded bundle's folder
    input_sha256: str | None = None  # a hidden set's job: its answer-free input (an object)
    cell_key: str | None = None  # ... and its cell's key as planned


def _event(conn: Connection, job_id: int, state: str, worker: str | None = None,
           note: str | None = None) -> None:
    """A change of a job's state kept in its history; a terminal one queued for the
    submission's webhook, if it has one, in the same transaction (an outbox: never lost,
    never sent for a change that did not happen)."""
    now = time.time()
    conn.execute(insert(events).values(job_id=job_id, at=now, state=state, worker=worker,
                                       note=note))
    if state in ENDED and conn.execute(
            select(webhooks.c.submission).join(jobs, jobs.c.submission == webhooks.c.submission)
            .where(jobs.c.id == job_id)).first():
        conn.execute(insert(deliveries).values(job_id=job_id, state=state, next_at=now))


def submit(engine: Engine, user_id: int, cells: list[tuple[str, str, dict]],
           stored: dict[int, str] | None = None,
           folder: str | None = None, gpus: int = 0,
           blind: dict[int, tuple[str, str]] | None = None,
           webhook: tuple[str, str] | None = None) -> tuple[str, list[int]]:
    """A submission of `cells` (bundle, test set, options): its id and its jobs' ids, in
    order. `stored` maps a cell's index to the key of its result already in the store: that
    job is finished at once, nothing run. `folder`: the uploaded bundle's folder; `gpus`: the
    GPUs the bundle asks for (only a worker with as many claims its jobs); `blind` maps a
    hidden set's cell to its answer-free input's object and its cell key; `webhook`: (URL,
    secret) told of each job's end."""
    stored, blind = stored or {}, blind or {}
    submission = uuid.uuid4().hex[:16]
    now = time.time()
    ids = []
    with engine.begin() as conn:
        if webhook:
            conn.execute(insert(webhooks).values(submission=submission, url=webhook[0],
                                                 secret=webhook[1]))
        for index, (bundle, testset, options) in enumerate(cells):
            key = stored.get(index)
            job_id = conn.execute(insert(jobs).values(
                submission=submission, user_id=user_id, bundle=bundle, folder=folder,
                testset=testset,
                options=json.dumps(options, sort_keys=True),
                state="finished" if key else "queued", attempts=0, result_key=key,
                gpus=gpus, **_blind(blind.get(index)), created_at=now,
                updated_at=now)).inserted_primary_key[0]
            _event(conn, job_id, "queued")
            if key:
                _event(conn, job_id, "finished", note="stored earlier: nothing run")
            ids.append(job_id)
    return submission, ids


def _blind(planned: tuple[str, str] | None) -> dict:
    """A hidden set's job's columns: its answer-free input's object and its cell key."""
    return dict(zip(("input_sha256", "cell_key"), planned or (None, None), strict=True))


def _used(usage: tuple[float, float] | None) -> dict:
    """The columns of what a job used, where it was counted."""
    return dict(zip(("cpu_s", "gpu_s"), usage, strict=True)) if usage else {}


def requeue(engine: Engine, earlier: list[dict], note: str,
            blind: dict[int, tuple[str, str]] | None = None) -> list[int]:
    """New jobs asking again for the cells of `earlier` jobs (rows of the jobs table), each in
    the same submission, for the same user; the earlier jobs and their results stay. Their
    ids, in order. `blind` maps an earlier job's id to its cell's answer-free input and key
    as planned now (a hidden set's)."""
    blind = blind or {}
    now = time.time()
    ids = []
    with engine.begin() as conn:
        for row in earlier:
            job_id = conn.execute(insert(jobs).values(
                submission=row["submission"], user_id=row["user_id"], bundle=row["bundle"],
                folder=row["folder"], testset=row["testset"], options=row["options"],
                gpus=row["gpus"], state="queued", attempts=0, **_blind(blind.get(row["id"])),
                created_at=now, updated_at=now)).inserted_primary_key[0]
            _event(conn, job_id, "queued", note=f"{note} (job {row['id']})")
            ids.append(job_id)
    return ids


def every_job(engine: Engine) -> list[dict]:
    """Every job, oldest first."""
    with engine.connect() as conn:
        rows = conn.execute(select(jobs).order_by(jobs.c.id)).mappings().all()
    return [dict(r) for r in rows]


def claim(engine: Engine, worker: str, lease_s: float = LEASE_SECONDS,
          per_user: int | None = None, gpus: int = 0,
          tier_caps: dict[str, int] | None = None) -> Claimed | None:
    """The next job to run (queued, or running under a lease that lapsed), now this worker's
    for `lease_s`; None when there is none. Users take turns: the job is the oldest of the
    user with the fewest jobs running, and of those the one served longest ago (round robin),
    so one user's hundred jobs never hold back another's one; `per_user` caps the jobs a
    user has running at once, and `tier_caps` those of a user of each tier ("default" for a
    tier not named); a job asking for more GPUs than the worker's `gpus` is left to a worker
    that has them."""
    now = time.time()
    free = and_(or_(jobs.c.state == "queued",
                    and_(jobs.c.state == "running", jobs.c.lease_until < now)),
                jobs.c.gpus <= gpus)
    running = select(jobs.c.user_id, func.count().label("n")).where(
        jobs.c.state == "running", jobs.c.lease_until >= now).group_by(jobs.c.user_id) \
        .subquery()
    served = select(jobs.c.user_id, func.max(events.c.at).label("at")).join(
        events, events.c.job_id == jobs.c.id).where(events.c.state == "running") \
        .group_by(jobs.c.user_id).subquery()
    busy = func.coalesce(running.c.n, 0)
    caps = [busy < per_user] if per_user else []
    named = {t: n for t, n in (tier_caps or {}).items() if t != "default"}
    if tier_caps:
        caps.append(busy < func.coalesce(
            case(named, value=users.c.tier, else_=tier_caps.get("default")) if named
            else tier_caps.get("default"), 1 << 30))
    with engine.begin() as conn:
        query = (select(jobs).outerjoin(running, running.c.user_id == jobs.c.user_id)
                 .outerjoin(served, served.c.user_id == jobs.c.user_id)
                 .join(users, users.c.id == jobs.c.user_id)
                 .where(free, *caps)
                 .order_by(busy, func.coalesce(served.c.at, 0.0), jobs.c.created_at,
                           jobs.c.id).limit(1))
        if engine.dialect.name == "postgresql":
            query = query.with_for_update(of=jobs, skip_locked=True)
        row = conn.execute(query).first()
        if row is None:
            return None
        taken = conn.execute(update(jobs).where(jobs.c.id == row.id, free).values(
            state="running", worker=worker, lease_until=now + lease_s,
            attempts=jobs.c.attempts + 1, updated_at=now))
        if taken.rowcount != 1:
            return None  # another worker took it in between: try again
        note = f"attempt {row.attempts + 1}" + (f", {row.worker}'s lease lapsed"
                                               if row.state == "running" else "")
        _event(conn, row.id, "running", worker, note)
    return Claimed(row.id, row.bundle, row.testset, json.loads(row.options),
                   row.attempts + 1, row.folder, row.input_sha256, row.cell_key)


def renew(engine: Engine, job_id: int, worker: str, lease_s: float = LEASE_SECONDS) -> bool:
    """Extend the lease of a job this worker holds; False when it holds it no longer."""
    with engine.begin() as conn:
        done = conn.execute(update(jobs).where(
            jobs.c.id == job_id, jobs.c.worker == worker, jobs.c.state == "running").values(
            lease_until=time.time() + lease_s))
    return done.rowcount == 1


def finish(engine: Engine, job_id: int, worker: str, *, result_key: str | None = None,
           failure_class: str | None = None, message: str | None = None,
           log_sha256: str | None = None, usage: tuple[float, float] | None = None) -> bool:
    """End a job this worker holds: finished with the store's cell key, or failed with its
    class, one line and the store's object of its run's log; False when it holds it no longer
    (another worker ends it). `usage`: the CPU- and GPU-seconds its run took, charged to
    its user (a scorer ending a handed-back job leaves the worker's as they are)."""
    state = "finished" if result_key else "failed"
    with engine.begin() as conn:
        done = conn.execute(update(jobs).where(
            jobs.c.id == job_id, jobs.c.worker == worker,
            jobs.c.state.in_(("running", "scoring"))).values(
            state=state, result_key=result_key, failure_class=failure_class,
            message=message, log_sha256=log_sha256, lease_until=None, updated_at=time.time(),
            **_used(usage)))
        if done.rowcount == 1:
            _event(conn, job_id, state, worker, message)
    return done.rowcount == 1


def show_log(engine: Engine, job_id: int, worker: str, written: int, tail: bytes) -> bool:
    """Keep the log of a job this worker runs as it is now (the bytes written, their tail),
    for readers to follow; False when the worker holds the job no longer."""
    with engine.begin() as conn:
        done = conn.execute(update(jobs).where(
            jobs.c.id == job_id, jobs.c.worker == worker, jobs.c.state == "running").values(
            live_log_bytes=written, live_log=tail))
    return done.rowcount == 1


def hand_over(engine: Engine, job_id: int, worker: str, output_sha256: str,
              usage: tuple[float, float] | None = None) -> bool:
    """A hidden set's job, run by this worker, handed to the server's scoring with the run's
    object; False when the worker holds it no longer."""
    with engine.begin() as conn:
        done = conn.execute(update(jobs).where(
            jobs.c.id == job_id, jobs.c.worker == worker, jobs.c.state == "running").values(
            state="scoring", output_sha256=output_sha256, lease_until=None,
            updated_at=time.time(), **_used(usage)))
        if done.rowcount == 1:
            _event(conn, job_id, "scoring", worker, "run handed back for scoring")
    return done.rowcount == 1


def claim_scoring(engine: Engine, scorer: str, lease_s: float = LEASE_SECONDS) -> dict | None:
    """The next job waiting to be scored (or one whose scorer's lease lapsed), now this
    scorer's; None when there is none."""
    now = time.time()
    free = and_(jobs.c.state == "scoring",
                or_(jobs.c.lease_until.is_(None), jobs.c.lease_until < now))
    with engine.begin() as conn:
        query = select(jobs).where(free).order_by(jobs.c.updated_at, jobs.c.id).limit(1)
        if engine.dialect.name == "postgresql":
            query = query.with_for_update(skip_locked=True)
        row = conn.execute(query).mappings().first()
        if row is None:
            return None
        taken = conn.execute(update(jobs).where(jobs.c.id == row["id"], free).values(
            worker=scorer, lease_until=now + lease_s, updated_at=now))
    return {**row, "worker": scorer} if taken.rowcount == 1 else None


def cancel(engine: Engine, job_id: int) -> bool:
    """Cancel a job that has not ended; False when it has."""
    with engine.begin() as conn:
        done = conn.execute(update(jobs).where(
            jobs.c.id == job_id, jobs.c.state.in_(("queued", "running", "scoring"))).values(
            state="cancelled", lease_until=None, updated_at=time.time()))
        if done.rowcount == 1:
            _event(conn, job_id, "cancelled")
    return done.rowcount == 1


def state_of(engine: Engine, job_id: int) -> str | None:
    """A job's state now (a worker asks between its steps whether it was cancelled)."""
    with engine.connect() as conn:
        row = conn.execute(select(jobs.c.state).where(jobs.c.id == job_id)).first()
    return None if row is None else row.state


def job(engine: Engine, job_id: int) -> dict | None:
    with engine.connect() as conn:
        row = conn.execute(select(jobs).where(jobs.c.id == job_id)).mappings().first()
    return None if row is None else dict(row)


def submission_jobs(engine: Engine, submission: str) -> list[dict]:
    with engine.connect() as conn:
        rows = conn.execute(select(jobs).where(jobs.c.submission == submission)
                            .order_by(jobs.c.id)).mappings().all()
    return [dict(r) for r in rows]


def history(engine: Engine, job_id: int) -> list[dict]:
    with engine.connect() as conn:
        rows = conn.execute(select(events).where(events.c.job_id == job_id)
                            .order_by(events.c.id)).mappings().all()
    return [dict(r) for r in rows]
