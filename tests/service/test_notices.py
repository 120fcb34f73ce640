"""Webhooks: every terminal state of a job is POSTed, signed with HMAC-SHA256 under the
submitter's secret, to a URL at an origin the operator's policy lists; a receiver that is
down is tried again with back-off, the same bytes each time. A job that failed says why in
one line everywhere: the API, its page and the webhook."""

from __future__ import annotations

import hashlib
import hmac
import http.server
import json
import re
import signal
import threading
import time

import pytest
from fastapi.testclient import TestClient

from evaluator.service import db, notices, queue
from evaluator.service.app import create_app
from evaluator.service.client import Client
from evaluator.store.store import Store
from tests import hostile
from tests.conftest import FIRST_WORD, tiny_registry
from tests.docker_kit import needs_docker
from tests.service.test_service import DEADLINE_S, start_server, worker

SECRET = "a-secret-of-the-submitter"


class Receiver:
    """A real HTTP server on the loopback that keeps every POST (its body and headers) and
    answers each with the next of `statuses` (then 200)."""

    def __init__(self, statuses: tuple[int, ...] = ()):
        outer, self.posts, self.statuses = self, [], list(statuses)

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.posts.append((body, dict(self.headers)))
                self.send_response(outer.statuses.pop(0) if outer.statuses else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def signed(self) -> list[dict]:
        """Each POST's JSON, after checking its signature as a receiver would."""
        out = []
        for body, headers in self.posts:
            expected = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
            assert hmac.compare_digest(headers["X-Qashift-Signature"], f"sha256={expected}")
            out.append(json.loads(body))
        return out

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def allow_webhooks(tmp_path, monkeypatch, origin: str) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(json.dumps({"webhook_origins": [origin]}) + "\n")
    monkeypatch.setenv("QASHIFT_POLICY", str(policy))


@pytest.mark.slow  # it starts a server or a worker process
def test_each_end_of_a_job_is_posted_once_signed_and_retried_when_the_receiver_is_down(
        database, tmp_path, monkeypatch, small_dev, workspace):
    url, token = database
    receiver = Receiver(statuses=(503,))  # down for the first POST
    tiny_registry(tmp_path, monkeypatch, {"tiny": small_dev}, {"first-word": FIRST_WORD})
    engine, store = db.connect(url), Store(workspace)
    api = TestClient(create_app(engine, store))
    auth = {"Authorization": f"Bearer {token}"}
    body = {"bundle": "first-word", "testsets": ["tiny"],
            "webhook": {"url": receiver.url, "secret": SECRET}}
    refused = api.post("/v1/submissions", headers=auth, json=body)
    assert refused.status_code == 422
    assert refused.json()["detail"] == (f"webhook {receiver.url!r}: its origin is not one the "
                                        f"operator's policy lists (webhook_origins)")
    allow_webhooks(tmp_path, monkeypatch, receiver.url.removesuffix("/hook"))
    try:
        made = api.post("/v1/submissions", headers=auth, json=body).json()
        cancelled = api.post("/v1/submissions", headers=auth,
                             json={**body, "limit": 3}).json()
        assert api.post(f"/v1/jobs/{cancelled['jobs'][0]}/cancel", headers=auth).is_success
        ran = worker("--exit-when-idle", runner="local")
        out, _ = ran.communicate(timeout=DEADLINE_S * 5)
        assert ran.returncode == 0, out
        now = time.time()
        assert notices.deliver_due(engine, store, now) == 1  # the receiver was down once
        assert notices.deliver_due(engine, store, now) == 0  # not due again yet
        assert notices.deliver_due(engine, store, now + 1.5) == 1  # retried: received
        assert notices.deliver_due(engine, store, now + 3600) == 0  # nothing is sent twice
    finally:
        receiver.close()
    posts = receiver.signed()
    assert receiver.posts[0][0] == receiver.posts[2][0]  # the retry sent the same bytes
    received = [posts[1], posts[2]]
    by_state = {p["state"]: p for p in received}
    assert set(by_state) == {"finished", "cancelled"}
    finished = by_state["finished"]
    assert finished["event"] == "job.finished" and finished["job"] == made["jobs"][0]
    [job] = api.get(f"/v1/submissions/{made['submission']}", headers=auth).json()["jobs"]
    assert finished["result"] == job["result"] and job["result"]["n"] > 0
    assert by_state["cancelled"]["job"] == cancelled["jobs"][0]


@pytest.mark.slow
@needs_docker[0]
@needs_docker[1]
def test_a_job_over_its_memory_limit_says_so_in_the_api_its_page_and_its_webhook(
        database, tmp_path, monkeypatch, small_dev, workspace):
    url, token = database
    receiver = Receiver()
    _, subs = tiny_registry(tmp_path, monkeypatch, {"tiny": small_dev}, {})
    hostile.bundle(subs, "memhog", resources={"memory": "128m"})
    allow_webhooks(tmp_path, monkeypatch, receiver.url.removesuffix("/hook"))
    proc, base = start_server(url)
    try:
        client = Client(base, token)
        made = client.submit("memhog", ["tiny"], webhook=(receiver.url, SECRET))
        ran = worker("--exit-when-idle", runner="docker")
        out, _ = ran.communicate(timeout=DEADLINE_S * 5)
        assert ran.returncode == 0, out
        [job] = client.submission(made["submission"])["jobs"]
        deadline = time.monotonic() + DEADLINE_S
        while not receiver.posts:  # the server's notifier sends it within a second or so
            assert time.monotonic() < deadline, "no webhook arrived"
            time.sleep(0.2)
        page = client._send("GET", f"/pages/submissions/{made['submission']}").text
        log = client.log(job["id"])
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        receiver.close()
    line = "memhog exceeded its memory limit of 128 MiB and was killed"
    assert job["state"] == "failed" and job["failure_class"] == "out-of-memory"
    assert job["message"].startswith(line)
    assert f"out-of-memory: {line}" in page
    assert "holding 64 MiB" in log  # its log is kept, never empty
    [posted] = receiver.signed()
    assert posted["event"] == "job.failed" and posted["failure_class"] == "out-of-memory"
    assert posted["message"] == job["message"] and posted["result"] is None
    assert queue.history(db.connect(url), job["id"])[-1]["state"] == "failed"


@pytest.mark.parametrize("origins, problem", [
    ("http://127.0.0.1:9", None),
    ("https://hooks.example.org/path", "webhook_origins: 'https://hooks.example.org/path' is "
                                       "not an http(s) origin"),
    ("ftp://hooks.example.org", "webhook_origins: 'ftp://hooks.example.org' is not an http(s) "
                                "origin"),
])
def test_the_policys_webhook_origins_are_origins_and_only_they_are_allowed(tmp_path, origins,
                                                                         problem):
    from evaluator.bundles import policy
    from evaluator.core.errors import ConfigError

    path = tmp_path / "policy.yaml"
    path.write_text(f"webhook_origins: [{origins!r}]\n")
    if problem:
        with pytest.raises(ConfigError, match=re.escape(problem)):
            policy.Policy.from_file(path)
        return
    allowed = policy.Policy.from_file(path)
    assert allowed.webhook_allowed("http://127.0.0.1:9/any/path")
    assert not allowed.webhook_allowed("http://127.0.0.1:10/any/path")
    assert not allowed.webhook_allowed("http://localhost:9/")
    assert not policy.Policy().webhook_allowed("http://127.0.0.1:9/")  # none by default
