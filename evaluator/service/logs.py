"""A job's log as server-sent events, live while it runs and whole once it ends: `state`
events (`{"state": ...}`) on each change, `log` events (`{"text": ...}`) with what was
written since the last, and one `end` event (`{"state", "failure_class", "message"}`). While
the job runs the text is what its worker last sent (`queue.show_log`, every second); when it
ends, the rest of the log the store keeps. `GET /v1/jobs/{id}/log/stream` (with a token)
and a submission's page (its capability URL) serve it; `remote logs --follow` reads it."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

from sqlalchemy import Engine

from evaluator.service import queue
from evaluator.store.store import Store

POLL_S = 0.5
OVERLAP = 256  # bytes of what was sent that locate the rest in the kept log
MAX_STREAM_S = 6 * 3600.0


def kept_log(job: dict, store: Store) -> bytes | None:
    """The log the store keeps of an ended job's run (a result's, or a failure's); a job that
    failed before anything ran (its bundle no longer resolves, its set unreadable) has its
    failure's line instead, so that no failed job shows an empty log."""
    row = store.get(job["result_key"]) if job["result_key"] else None
    sha = row["log_sha256"] if row else job["log_sha256"]
    data = store.get_object(sha) if sha else None
    if data is None and job["state"] == "failed" and job["message"]:
        return f"{job['failure_class']}: {job['message']}\n".encode()
    return data


def rest_of(kept: bytes, sent: bytes) -> bytes:
    """What the kept log holds after what was sent live (`sent`: its last bytes)."""
    if not sent:
        return kept
    at = kept.rfind(sent[-OVERLAP:])
    return kept[at + len(sent[-OVERLAP:]):] if at >= 0 else b"\n[the log as kept]\n" + kept


def event(name: str, data: dict) -> str:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"


def text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def events(engine: Engine, store: Store, job_id: int) -> Iterator[str]:
    """The job's log and states as server-sent events, until it ends."""
    state, written, tail = None, 0, b""
    deadline = time.monotonic() + MAX_STREAM_S
    while time.monotonic() < deadline:
        job = queue.job(engine, job_id)
        if job["state"] != state:
            state = job["state"]
            yield event("state", {"state": state})
        if state in queue.ENDED:
            rest = rest_of(kept_log(job, store) or b"", tail)
            if rest:
                yield event("log", {"text": text(rest)})
            yield event("end", {k: job[k] for k in ("state", "failure_class", "message")})
            return
        if state == "running" and job["live_log_bytes"] and job["live_log_bytes"] > written:
            live = job["live_log"] or b""
            new = job["live_log_bytes"] - written
            chunk = live[-new:] if new <= len(live) else \
                f"[... {new - len(live)} bytes not shown ...]\n".encode() + live
            written, tail = job["live_log_bytes"], (tail + chunk)[-OVERLAP:]
            yield event("log", {"text": text(chunk)})
        time.sleep(POLL_S)
