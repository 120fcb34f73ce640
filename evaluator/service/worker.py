"""A worker: claim a job, hold its lease while it runs, evaluate its cell through the one
entry (`api.evaluate`: the store's cell lease keeps a cell from running twice even when two
workers hold its job one after the other), and end the job with the cell's key or its
failure. `qashift worker` runs this loop; several workers share one database."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import asdict

from sqlalchemy import Engine

from evaluator.api.evaluation import evaluate
from evaluator.core.errors import UserError, failure_class_of
from evaluator.pipeline.cell import Renewal
from evaluator.service import cells, queue
from evaluator.store.store import Store


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def run_job(engine: Engine, store: Store, job: queue.Claimed, worker: str, runner: str,
            lease_s: float) -> str:
    """Evaluate the claimed job's cell and end the job; the state it ended in (or "lost"
    when another worker holds it now)."""
    # the job's lease renewed while its cell runs; a lost lease stops renewing (finish then
    # finds another worker holds the job)
    with Renewal(lease_s / 4, lambda: queue.renew(engine, job.id, worker, lease_s)):
        try:
            config, chosen = cells.request(asdict(job), store, runner)
            done = evaluate(config, store, chosen=chosen)
        except UserError as error:  # an id that no longer resolves, a set unreadable
            ended = queue.finish(engine, job.id, worker, failure_class=failure_class_of(error),
                                 message=str(error))
            return "failed" if ended else "lost"
    if done.not_applicable:
        _, _, why = done.not_applicable[0]
        ended = queue.finish(engine, job.id, worker, failure_class="not-applicable",
                             message=why)
        return "failed" if ended else "lost"
    [outcome] = done.report.outcomes
    if outcome.result is not None:
        ended = queue.finish(engine, job.id, worker, result_key=outcome.result.row["key"])
        return "finished" if ended else "lost"
    failures = store.failures(outcome.job.key)
    ended = queue.finish(engine, job.id, worker, failure_class=outcome.failure_class,
                         message=outcome.message,
                         log_sha256=failures[-1]["log_sha256"] if failures else None)
    return "failed" if ended else "lost"


def work(engine: Engine, store: Store, *, runner: str = "auto",
         lease_s: float = queue.LEASE_SECONDS, poll_s: float = 1.0,
         per_user: int | None = None, gpus: int = 0,
         max_jobs: int | None = None, exit_when_idle: bool = False,
         say: Callable[[str], None] = lambda _: None, worker: str | None = None) -> int:
    """Claim and run jobs until stopped (or `max_jobs` ran, or, with `exit_when_idle`, none
    is left), users taking turns and each with at most `per_user` jobs running, and only jobs
    asking for at most `gpus` GPUs; the number of jobs this worker ended."""
    worker = worker or worker_name()
    ended = 0
    while max_jobs is None or ended < max_jobs:
        job = queue.claim(engine, worker, lease_s, per_user, gpus)
        if job is None:
            if exit_when_idle:
                return ended
            time.sleep(poll_s)
            continue
        say(f"job {job.id}: {job.bundle} x {job.testset} (attempt {job.attempt})")
        state = run_job(engine, store, job, worker, runner, lease_s)
        say(f"job {job.id}: {state}")
        ended += state != "lost"
    return ended
