"""A worker: claim a job, hold its lease while it runs, evaluate its cell through the one
entry (`api.evaluate`: the store's cell lease keeps a cell from running twice even when two
workers hold its job one after the other), and end the job with the cell's key or its
failure. A job on a hidden test set is run blind: the bundle on the job's answer-free input,
the run handed back for the server to score (`pipeline.blind`); its gold never reaches the
worker. `qashift worker` runs this loop; several workers share one database."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import asdict

from sqlalchemy import Engine

from evaluator.api.evaluation import evaluate
from evaluator.bundles.spec import Bundle
from evaluator.core.errors import RunFailure, UserError, failure_class_of
from evaluator.pipeline.blind import run_blind
from evaluator.pipeline.cell import Renewal
from evaluator.runners.base import live_logs
from evaluator.runners.dispatch import Dispatcher
from evaluator.service import cells, queue, quotas
from evaluator.store.store import Store


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def run_job(engine: Engine, store: Store, job: queue.Claimed, worker: str, runner: str,
            lease_s: float) -> str:
    """Evaluate the claimed job's cell and end the job, charging its user the CPU- and
    GPU-seconds it took; the state it ended in (or "lost" when another worker holds it
    now)."""
    started, chosen = time.monotonic(), []
    # the job's lease renewed while its cell runs; a lost lease stops renewing (finish then
    # finds another worker holds the job); its log sent every second while it grows
    with Renewal(lease_s / 4, lambda: queue.renew(engine, job.id, worker, lease_s)), \
            Renewal(LIVE_LOG_S, LiveLog(engine, job.id, worker)):
        if job.input_sha256:
            return _run_blind_job(engine, store, job, worker, runner, started)
        try:
            config, chosen = cells.request(asdict(job), store, runner)
            done = evaluate(config, store, chosen=chosen)
        except UserError as error:  # an id that no longer resolves, a set unreadable
            ended = queue.finish(engine, job.id, worker, failure_class=failure_class_of(error),
                                 message=str(error), usage=usage(started, chosen))
            return "failed" if ended else "lost"
    used = usage(started, chosen)
    if done.not_applicable:
        _, _, why = done.not_applicable[0]
        ended = queue.finish(engine, job.id, worker, failure_class="not-applicable",
                             message=why, usage=used)
        return "failed" if ended else "lost"
    [outcome] = done.report.outcomes
    if outcome.result is not None:
        ended = queue.finish(engine, job.id, worker, result_key=outcome.result.row["key"],
                             usage=used)
        return "finished" if ended else "lost"
    ended = queue.finish(engine, job.id, worker, failure_class=outcome.failure_class,
                         message=outcome.message, log_sha256=failure_log(store, outcome.job.key),
                         usage=used)
    return "failed" if ended else "lost"


def failure_log(store: Store, key: str) -> str | None:
    """The store object of the log of a cell's last recorded failure, if any."""
    failures = store.failures(key)
    return failures[-1]["log_sha256"] if failures else None


def usage(started: float, chosen: list[Bundle]) -> tuple[float, float]:
    """The CPU- and GPU-seconds a job took: its wall time (from `started`, a monotonic
    time) times the CPUs and GPUs its bundle is given."""
    wall = time.monotonic() - started
    resources = chosen[0].resources if chosen else {}
    return wall * float(resources.get("cpus") or 1), wall * float(resources.get("gpus") or 0)


LIVE_LOG_S = 1.0


class LiveLog:
    """Sends the log of the run going on in this process to the job's row when it grew."""

    def __init__(self, engine: Engine, job_id: int, worker: str):
        self.engine, self.job_id, self.worker, self.sent = engine, job_id, worker, -1

    def __call__(self) -> bool | None:
        now = live_logs()
        if now is None or now[0] == self.sent:
            return None
        self.sent = now[0]
        return queue.show_log(self.engine, self.job_id, self.worker, *now)


def _run_blind_job(engine: Engine, store: Store, job: queue.Claimed, worker: str,
                   runner: str, started: float) -> str:
    """A hidden set's job: its bundle run on the answer-free input, the run handed back."""
    chosen: list[Bundle] = []
    try:
        config, chosen = cells.request(asdict(job), store, runner)
        data = store.get_object(job.input_sha256)
        if data is None:
            raise RunFailure("internal-error", f"the input of job {job.id} is missing from "
                             f"the store")
        handed = run_blind(chosen[0], job.testset, job.cell_key, job.options, data,
                           Dispatcher(config.runner), store, config.device)
    except (UserError, RunFailure) as error:
        ended = queue.finish(engine, job.id, worker, failure_class=failure_class_of(error),
                             message=str(error),
                             log_sha256=failure_log(store, job.cell_key)
                             if isinstance(error, RunFailure) else None,
                             usage=usage(started, chosen))
        return "failed" if ended else "lost"
    except Exception as exc:  # noqa: BLE001 - a bug or a hostile output: this job fails
        ended = queue.finish(engine, job.id, worker, failure_class="internal-error",
                             message=f"{type(exc).__name__}: {str(exc)[:300]}")
        return "failed" if ended else "lost"
    used = usage(started, chosen)
    return "scoring" if queue.hand_over(engine, job.id, worker, handed, used) else "lost"


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
    say(f"worker {worker}: claiming jobs for the {runner} runner (at most {gpus} GPUs each)"
        + ("" if exit_when_idle else "; Ctrl-C stops it"))
    while max_jobs is None or ended < max_jobs:
        job = queue.claim(engine, worker, lease_s, per_user, gpus, quotas.running_caps())
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
