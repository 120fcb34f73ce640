"""The HTTP API, versioned under /v1 (OpenAPI at /docs).

    GET  /v1/healthz                 the server and its database answer
    GET  /v1/testsets                the test sets a submission may name (hidden ones too)
    POST /v1/bundles                 a bundle folder as an archive (tar, tar.gz, zip: the
                                     request's body), unpacked through the gate: its id and
                                     upload digest; a link, FIFO, device, `..` or absolute
                                     name, or a bomb, is a 422 in one line
    POST /v1/submissions             {"bundle", "testsets", "upload"?, "limit"?, "seed"?,
                                     "webhook"?: {"url", "secret"}}: its jobs (`upload`:
                                     the digest of an uploaded bundle; `webhook`: told of
                                     each job's end, `service.notices`)
    GET  /v1/submissions/{id}        its jobs, each with its state and, once finished, its
                                     result as `evaluate --json` prints it
    GET  /v1/jobs/{id}               one job and its history
    GET  /v1/jobs/{id}/log           the log of the job's run, as text, once it has ended
    GET  /v1/jobs/{id}/log/stream    its log live, as server-sent events (`service.logs`)
    GET  /v1/jobs/{id}/samples       its questions one by one: prediction, gold, EM, F1 (a
                                     hidden set's: admins only)
    POST /v1/jobs/{id}/cancel        cancel a job that has not ended
    GET  /v1/results                 every cell's result as it is today (`api.Results`), less
                                     the sets whose results are withheld now
    GET  /pages/submissions/{id}     a submission's page: its jobs' states, live logs,
                                     results with intervals, and provenance (the id is its
                                     key: anyone given the link sees it)
    GET  /pages/submit               the upload page: a token, an archive or a bundle id, test
                                     sets; it follows the submission without reloading
    GET  /pages/...                  the results store's site (leaderboards, test sets, models,
                                     logs), rebuilt when the store changes (`service.pages`);
                                     `/` leads there

A request that changes or reads a submission carries a token in `Authorization: Bearer`; a
token anywhere in the URL is refused (URLs end up in logs). A submission past the user's
tier's daily limit is a 429 with Retry-After and one line saying which limit
(`service.quotas`). Errors are one line, in
`{"detail": ...}`. Cells are planned by the one evaluation entry's steps (`api.evaluation`:
an id that names no bundle or test set is a 422); a cell the store holds is answered at once.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import (
    FileResponse,
    HTMLResponse,
    PlainTextResponse,
    RedirectResponse,
    StreamingResponse,
)
from pydantic import BaseModel, Field
from sqlalchemy import Engine

from evaluator import __version__
from evaluator.api.evaluation import EvaluationConfig, resolve
from evaluator.api.results import Results
from evaluator.bundles import policy
from evaluator.bundles import spec as bundles
from evaluator.core.errors import UserError
from evaluator.core.files import run_tempdir
from evaluator.data import testsets
from evaluator.service import accounts, boards, cells, logs, queue, quotas, uploads
from evaluator.service.pages import Pages
from evaluator.service.pages import submission_page as render_submission
from evaluator.service.pages import submit_page as render_submit
from evaluator.store.store import Store

URL_TOKENS = ("token", "access_token", "api_key", "key")  # never accepted in a URL


class Webhook(BaseModel):
    url: str = Field(max_length=2000)
    secret: str = Field(min_length=16, max_length=200)


class Submission(BaseModel):
    bundle: str = Field(max_length=200)
    testsets: list[str] = Field(min_length=1, max_length=200)
    upload: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    limit: int | None = Field(default=None, gt=0)
    seed: int = 0
    webhook: Webhook | None = None


def _account(request: Request) -> accounts.Account:
    """Who the request's Bearer token belongs to; 401 and one line otherwise."""
    if any(name in request.query_params for name in URL_TOKENS):
        raise HTTPException(401, "a token goes in the Authorization header (Bearer), never "
                                 "in the URL")
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise HTTPException(401, "no token: send Authorization: Bearer TOKEN")
    found = accounts.account_of(request.app.state.engine, token.strip())
    if found is None:
        raise HTTPException(401, "unknown token")
    return found


Caller = Annotated[accounts.Account, Depends(_account)]


def create_app(engine: Engine, store: Store, pages: Pages | None = None,
               place: Callable[[str, list[dict]], dict] | None = None) -> FastAPI:
    """The API over the service's database and the results store; with `pages`, the store's
    site served too; with `place` (a bundle's results -> where they land on the population's
    trend: `analysis.studies.placement.place`), each ended submission's page shows it."""
    app = FastAPI(title="qashift", version=__version__,
                  description="Evaluate extractive-QA submissions under distribution shift")
    app.state.engine = engine

    def own(job: dict, who: accounts.Account) -> None:
        if job["user_id"] != who.user_id and who.scope != "admin":
            raise HTTPException(404, "no such submission")

    def shown(job: dict, who: accounts.Account, stale: set[int] = frozenset()) -> dict:
        out = {k: job[k] for k in ("id", "submission", "bundle", "testset", "state",
                                   "attempts", "failure_class", "message")}
        out["stale"] = job["id"] in stale  # its test set's bytes or scorer changed since
        return {**out, **cells.shown_result(engine, job, store, who.scope == "admin")}

    @app.get("/v1/healthz")
    def healthz() -> dict:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
        return {"ok": True, "version": __version__}

    @app.get("/v1/testsets")
    def testset_list() -> list[dict]:
        good, _ = testsets.scan()
        rules = boards.rules(engine)
        for name, found in rules.items():
            if found.hidden and (hidden := boards.hidden_set(engine, name)) is not None:
                good[name] = hidden
        listed = []
        for t in good.values():
            found = rules.get(t.id, boards.Rules(t.id))
            listed.append({"id": t.id, "name": t.name, "kind": t.kind,
                           "questions": t.questions, "reference": t.reference,
                           "hidden": found.hidden, "visibility": found.visibility})
        return listed

    @app.post("/v1/bundles", status_code=201)
    async def upload(request: Request, who: Caller) -> dict:
        with run_tempdir("receive") as tmp:
            archive = Path(tmp) / "archive"
            received = 0
            with open(archive, "wb") as out:
                async for chunk in request.stream():
                    received += len(chunk)
                    if received > uploads.ARCHIVE_CAP:
                        raise HTTPException(413, f"the archive is larger than "
                                                 f"{uploads.ARCHIVE_CAP >> 20} MiB")
                    if over := quotas.upload_over(who.tier, received):
                        raise HTTPException(413, over.line)
                    out.write(chunk)
            try:
                bundle = await run_in_threadpool(uploads.store_upload, archive,
                                                 store.workspace)
            except UserError as error:
                raise HTTPException(422, str(error)) from None
        return {"bundle": bundle.id, "upload": bundle.folder.parent.name,
                "digest": bundle.digest}

    @app.post("/v1/submissions", status_code=201)
    def submit(body: Submission, who: Caller) -> dict:
        if over := (quotas.submission_over(engine, who.user_id, who.tier)
                    or quotas.hours_over(engine, who.user_id, who.tier)):
            raise HTTPException(429, over.line,
                                headers={"Retry-After": str(over.retry_after_s)})
        if body.webhook and not policy.current().webhook_allowed(body.webhook.url):
            raise HTTPException(422, f"webhook {body.webhook.url!r}: its origin is not one the "
                                     f"operator's policy lists (webhook_origins)")
        config = EvaluationConfig(bundles=(body.bundle,), testsets=tuple(body.testsets),
                                  limit=body.limit, seed=body.seed)
        folder = None
        try:
            if body.upload:
                folder = store.workspace / "uploads" / body.upload / body.bundle
                if not folder.is_dir():
                    raise UserError(f"no upload {body.upload[:12]} of bundle {body.bundle!r}; "
                                    f"POST /v1/bundles first")
                chosen = [bundles.from_folder(folder)]
            else:
                chosen = resolve(config, store)
            planned, skipped = boards.plan(engine, config, chosen)
        except UserError as error:
            raise HTTPException(422, str(error)) from None
        if not planned:
            raise HTTPException(422, "no cell applies: " + "; ".join(
                f"{b} x {t}: {why}" for b, t, why in skipped))
        rules = boards.rules(engine)
        for testset in {job.testset.id for job in planned}:
            limit = rules.get(testset, boards.Rules(testset)).daily_limit
            if over := quotas.testset_over(engine, who.user_id, testset, limit):
                raise HTTPException(429, over.line,
                                    headers={"Retry-After": str(over.retry_after_s)})
        stored = {i: row["key"] for i, job in enumerate(planned)
                  if (row := store.get(job.key)) is not None}
        blind = {i: (boards.blind_input(job, store), job.key) for i, job in enumerate(planned)
                 if i not in stored and rules.get(job.testset.id, boards.Rules("")).hidden}
        submission, ids = queue.submit(engine, who.user_id, [
            (job.bundle.id, job.testset.id, job.options) for job in planned], stored,
            str(folder) if folder else None, int(planned[0].bundle.resources.get("gpus") or 0),
            blind, (body.webhook.url, body.webhook.secret) if body.webhook else None)
        return {"submission": submission, "jobs": ids,
                "page": f"/pages/submissions/{submission}"}

    @app.get("/v1/submissions/{submission}")
    def submission_state(submission: str,
                         who: Caller) -> dict:
        found = queue.submission_jobs(engine, submission)
        if not found:
            raise HTTPException(404, "no such submission")
        own(found[0], who)
        stale = {r["id"] for r in cells.stale_jobs(engine, store, found).stale}
        return {"submission": submission, "jobs": [shown(job, who, stale) for job in found],
                "done": all(job["state"] in queue.ENDED for job in found)}

    def owned_job(job_id: int, who: accounts.Account) -> dict:
        job = queue.job(engine, job_id)
        if job is None:
            raise HTTPException(404, "no such job")
        own(job, who)
        return job

    @app.get("/v1/jobs/{job_id}")
    def job_state(job_id: int, who: Caller) -> dict:
        job = owned_job(job_id, who)
        return {**shown(job, who), "history": [
            {k: e[k] for k in ("at", "state", "worker", "note")}
            for e in queue.history(engine, job_id)]}

    @app.get("/v1/jobs/{job_id}/log", response_class=PlainTextResponse)
    def job_log(job_id: int, who: Caller) -> str:
        job = owned_job(job_id, who)
        if job["state"] not in queue.ENDED:
            raise HTTPException(409, f"job {job_id} is {job['state']}: its log is kept when "
                                     f"it ends")
        data = logs.kept_log(job, store)
        if data is None:
            raise HTTPException(404, f"job {job_id} ({job['state']}) left no log")
        return logs.text(data)

    def log_stream(job_id: int) -> StreamingResponse:
        return StreamingResponse(logs.events(engine, store, job_id),
                                 media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store"})

    @app.get("/v1/jobs/{job_id}/log/stream")
    def job_log_stream(job_id: int, who: Caller) -> StreamingResponse:
        owned_job(job_id, who)
        return log_stream(job_id)

    @app.get("/v1/jobs/{job_id}/samples")
    def job_samples(job_id: int, who: Caller) -> list[dict]:
        job = owned_job(job_id, who)
        rules = boards.rules_of(engine, job["testset"])
        if rules.hidden and who.scope != "admin":
            raise HTTPException(403, f"the per-question results of hidden test set "
                                     f"{job['testset']!r} are for admins")
        if not rules.shown_to(who.scope == "admin"):
            raise HTTPException(403, boards.withheld_line(rules))
        row, _ = cells.job_result(job, store)
        if row is None:
            raise HTTPException(409, f"job {job_id} is {job['state']}: it has no result")
        testset = boards.hidden_set(engine, job["testset"]) if rules.hidden else None
        return cells.samples(row, store, testset)

    @app.post("/v1/jobs/{job_id}/cancel")
    def job_cancel(job_id: int, who: Caller) -> dict:
        job = owned_job(job_id, who)
        if not queue.cancel(engine, job_id):
            raise HTTPException(409, f"job {job_id} has ended ({job['state']})")
        return {"id": job_id, "state": "cancelled"}

    @app.get("/v1/results")
    def results(bundle: str | None = None, testset: str | None = None) -> list[dict]:
        withheld = boards.withheld(engine)
        return [{k: r.get(k) for k in ("bundle", "testset", "n", "em", "em_lo", "em_hi", "f1",
                                       "f1_lo", "f1_hi", "level", "key")}
                for r in Results(store).rows(bundle, testset) if r["testset"] not in withheld]

    @app.get("/", include_in_schema=False)
    def home() -> RedirectResponse:
        return RedirectResponse("/pages/index.html")

    @app.get("/pages/submissions/{submission}", include_in_schema=False,
             response_class=HTMLResponse)
    def submission_page(submission: str) -> str:
        found = queue.submission_jobs(engine, submission) \
            if re.fullmatch(r"[0-9a-f]{16}", submission) else []
        if not found:
            raise HTTPException(404, "no such submission")
        withheld = boards.withheld(engine)
        stale = {r["id"] for r in cells.stale_jobs(engine, store, found).stale}
        return render_submission(submission, found, store, withheld,
                                 placed(found, withheld) if place else None, stale)

    placements: dict[tuple, dict] = {}  # by the results placed: computed once

    def placed(found: list[dict], withheld: dict[str, str]) -> dict | None:
        """Where an ended submission's shown results land on the trend (None before)."""
        if not all(job["state"] in queue.ENDED for job in found):
            return None
        results = [result for job in found if job["testset"] not in withheld
                   and (result := cells.job_result(job, store)[1]) is not None]
        key = (found[0]["bundle"], *sorted(r["key"] for r in results))
        if key not in placements:
            placements[key] = place(found[0]["bundle"], results)
        return placements[key]

    @app.get("/pages/submit", include_in_schema=False, response_class=HTMLResponse)
    def submit_page() -> str:
        good, _ = testsets.scan()
        hidden = [{"id": t, "questions": found.questions} for t in boards.rules(engine)
                  if (found := boards.hidden_set(engine, t)) is not None]
        return render_submit([{"id": t.id, "questions": t.questions}
                              for t in good.values() if t.kind != "training"] + hidden)

    @app.get("/pages/submissions/{submission}/jobs/{job_id}/log", include_in_schema=False)
    def submission_log_stream(submission: str, job_id: int) -> StreamingResponse:
        job = queue.job(engine, job_id)
        if job is None or job["submission"] != submission:
            raise HTTPException(404, "no such job")
        return log_stream(job_id)

    @app.get("/pages/{path:path}", include_in_schema=False)
    def page(path: str) -> FileResponse:
        if pages is None:
            raise HTTPException(404, "this server serves no pages")
        if not pages.ready():
            raise HTTPException(503, pages.problem or "the pages are being built; try again "
                                "in a moment", headers={"Retry-After": "5"})
        root = pages.folder.resolve()
        target = (root / (path or "index.html")).resolve()
        if not target.is_relative_to(root) or not target.is_file():
            raise HTTPException(404, "no such page")
        return FileResponse(target)

    return app
