"""Webhooks: a submission may name a URL (at an origin the operator's policy lists in
`webhook_origins`) and a secret; every terminal state of each of its jobs is POSTed there as
JSON, signed `X-Qashift-Signature: sha256=HEX` (HMAC-SHA256 of the body under the secret).
A delivery is queued in the transaction that ends the job (`queue._event`), sent by the
server's notifier, and retried with back-off (1 s, 2 s, 4 s ... at most an hour apart,
`MAX_ATTEMPTS` in all) until the receiver answers 2xx; each retry sends the same bytes."""

from __future__ import annotations

import hashlib
import hmac
import json
import time

import httpx
from sqlalchemy import Engine, select, update

from evaluator.service import cells, queue
from evaluator.service.db import deliveries, jobs, webhooks
from evaluator.store.store import Store

MAX_ATTEMPTS = 10
SIGNATURE = "X-Qashift-Signature"


def signature(secret: str, body: bytes) -> str:
    """The signature header's value: what a receiver computes to check a POST."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def backoff_s(attempts: int) -> float:
    return float(min(3600, 2 ** max(attempts - 1, 0)))


def body_of(engine: Engine, store: Store, job_id: int, state: str) -> bytes:
    """What a delivery says: the job, its end and, where the set's rules let the submitter
    see it, its result as the API shows it."""
    job = queue.job(engine, job_id)
    doc = {"event": f"job.{state}", "job": job_id, "submission": job["submission"],
           "bundle": job["bundle"], "testset": job["testset"], "state": state,
           "failure_class": job["failure_class"], "message": job["message"],
           **cells.shown_result(engine, job, store, admin=False), "at": job["updated_at"]}
    return json.dumps(doc, sort_keys=True).encode()


def deliver_due(engine: Engine, store: Store, now: float | None = None) -> int:
    """Send every delivery that is due; how many were received."""
    now = time.time() if now is None else now
    with engine.connect() as conn:
        due = conn.execute(
            select(deliveries, webhooks.c.url, webhooks.c.secret, jobs.c.submission)
            .join(jobs, jobs.c.id == deliveries.c.job_id)
            .join(webhooks, webhooks.c.submission == jobs.c.submission)
            .where(deliveries.c.delivered_at.is_(None), deliveries.c.next_at <= now,
                   deliveries.c.attempts < MAX_ATTEMPTS)
            .order_by(deliveries.c.id)).mappings().all()
    received = 0
    for row in due:
        body = row["body"].encode() if row["body"] else \
            body_of(engine, store, row["job_id"], row["state"])
        error = None
        try:
            reply = httpx.post(row["url"], content=body, timeout=10, trust_env=False,
                               follow_redirects=False, headers={
                                   "Content-Type": "application/json",
                                   SIGNATURE: signature(row["secret"], body),
                                   "X-Qashift-Delivery": str(row["id"])})
            if not 200 <= reply.status_code < 300:
                error = f"the receiver answered {reply.status_code}"
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"[:300]
        attempts = row["attempts"] + 1
        with engine.begin() as conn:
            conn.execute(update(deliveries).where(deliveries.c.id == row["id"]).values(
                body=body.decode(), attempts=attempts, last_error=error,
                delivered_at=None if error else time.time(),
                next_at=now + backoff_s(attempts)))
        received += error is None
    return received
