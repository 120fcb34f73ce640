"""What `qashift remote` sends to a server: one small class over httpx, the token always in
the Authorization header; a server's error is one line."""

from __future__ import annotations

import io
import json
import os
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from evaluator.core.errors import UserError

SERVER_ENV, TOKEN_ENV = "QASHIFT_SERVER", "QASHIFT_TOKEN"


class Client:
    def __init__(self, server: str | None = None, token: str | None = None,
                 timeout_s: float = 30.0):
        self.server = (server or os.environ.get(SERVER_ENV) or "").rstrip("/")
        token = token or os.environ.get(TOKEN_ENV)
        if not self.server:
            raise UserError(f"no server: give --server URL or set {SERVER_ENV}")
        if not token:
            raise UserError(f"no token: give --token or set {TOKEN_ENV} (`qashift admin "
                            f"token create NAME` on the server makes one)")
        self.http = httpx.Client(base_url=self.server, timeout=timeout_s, trust_env=False,
                                 headers={"Authorization": f"Bearer {token}"})

    def _send(self, method: str, path: str, **kwargs) -> httpx.Response:
        """The server's reply; its error, or no reply, as one line."""
        try:
            reply = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise UserError(f"{self.server}: {type(exc).__name__}: {exc}") from None
        if reply.status_code >= 400:
            raise UserError(f"{self.server} answered {reply.status_code}: {_detail(reply)}")
        return reply

    def _call(self, method: str, path: str, **kwargs) -> dict | list:
        return self._send(method, path, **kwargs).json()

    def submit(self, bundle: str, testsets: list[str], limit: int | None = None,
               seed: int = 0, upload: str | None = None,
               webhook: tuple[str, str] | None = None) -> dict:
        """Submit `bundle` on `testsets`; `webhook`: (URL, secret) told of each job's end."""
        return self._call("POST", "/v1/submissions", json={
            "bundle": bundle, "testsets": list(testsets), "limit": limit, "seed": seed,
            **({"upload": upload} if upload else {}),
            **({"webhook": {"url": webhook[0], "secret": webhook[1]}} if webhook else {})})

    def upload(self, folder: Path) -> dict:
        """Send a bundle folder as a tar.gz (its links sent as links: the server refuses
        them); its id and upload digest."""
        packed = io.BytesIO()
        with tarfile.open(fileobj=packed, mode="w:gz") as tar:
            tar.add(folder, arcname=folder.name,
                    filter=lambda m: None if "__pycache__" in m.name else m)
        return self._call("POST", "/v1/bundles", content=packed.getvalue(),
                          headers={"Content-Type": "application/gzip"})

    def submission(self, submission: str) -> dict:
        return self._call("GET", f"/v1/submissions/{submission}")

    def job(self, job_id: int) -> dict:
        return self._call("GET", f"/v1/jobs/{job_id}")

    def log(self, job_id: int) -> str:
        return self._send("GET", f"/v1/jobs/{job_id}/log").text

    def samples(self, job_id: int) -> list[dict]:
        """A finished job's questions one by one (a hidden set's: admins only)."""
        return self._call("GET", f"/v1/jobs/{job_id}/samples")

    def follow_log(self, job_id: int, write: Callable[[str], None]) -> dict:
        """Write a job's log as it is written (server-sent events) until the job ends; how
        it ended (`state`, `failure_class`, `message`)."""
        name, ended = None, None
        try:
            with self.http.stream("GET", f"/v1/jobs/{job_id}/log/stream",
                                  timeout=httpx.Timeout(30.0, read=None)) as reply:
                if reply.status_code >= 400:
                    reply.read()
                    raise UserError(f"{self.server} answered {reply.status_code}: "
                                    f"{_detail(reply)}")
                for line in reply.iter_lines():
                    if line.startswith("event: "):
                        name = line[7:]
                    elif line.startswith("data: ") and name == "log":
                        write(json.loads(line[6:])["text"])
                    elif line.startswith("data: ") and name == "end":
                        ended = json.loads(line[6:])
        except httpx.HTTPError as exc:
            raise UserError(f"{self.server}: {type(exc).__name__}: {exc}") from None
        if ended is None:
            raise UserError(f"{self.server}: the log of job {job_id} ended before the job did")
        return ended

    def cancel(self, job_id: int) -> dict:
        return self._call("POST", f"/v1/jobs/{job_id}/cancel")

    def wait_job(self, job_id: int, *, poll_s: float = 1.0,
                 say: Callable[[str], None] = lambda _: None) -> dict:
        """The job once it has ended, saying each change of state."""
        seen = None
        while True:
            job = self.job(job_id)
            if job["state"] != seen:
                seen = job["state"]
                say(f"job {job_id} {job['bundle']} x {job['testset']}: {seen}")
            if seen in ("finished", "failed", "cancelled"):
                return job
            time.sleep(poll_s)

    def wait(self, submission: str, *, poll_s: float = 1.0, timeout_s: float | None = None,
             say: Callable[[str], None] = lambda _: None) -> dict:
        """The submission once every job has ended, saying each change of state."""
        started, seen = time.monotonic(), {}
        while True:
            state = self.submission(submission)
            for job in state["jobs"]:
                if seen.get(job["id"]) != job["state"]:
                    seen[job["id"]] = job["state"]
                    say(f"job {job['id']} {job['bundle']} x {job['testset']}: {job['state']}")
            if state["done"]:
                return state
            if timeout_s is not None and time.monotonic() - started > timeout_s:
                raise UserError(f"submission {submission} has not ended after {timeout_s:g} "
                                f"s; `qashift remote status {submission}` follows it")
            time.sleep(poll_s)


def _detail(reply: httpx.Response) -> str:
    """A server's error in one line: its `detail`, the fields a schema refused, or the start
    of its text."""
    try:
        detail = reply.json().get("detail")
    except (ValueError, AttributeError):
        return reply.text[:300]
    if isinstance(detail, list):  # a request the API's schema refused
        return "; ".join(f"{'.'.join(map(str, d.get('loc', [])))}: {d.get('msg')}"
                         for d in detail)
    return str(detail)
