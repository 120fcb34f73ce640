"""A running job's log, live: `remote logs ID --follow` shows what the submission has written
while it still runs (server-sent events), then the rest and how the job ended; the stream
gives the whole log again once the job has ended."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest
from fastapi.testclient import TestClient

from evaluator.service import accounts, db, queue
from evaluator.service.app import create_app
from evaluator.service.client import Client
from evaluator.store.store import Store
from tests.conftest import FIRST_WORD, tiny_registry
from tests.service.test_service import DEADLINE_S, start_server, worker

WAITS_FOR = """import os, sys, time
print("started: waiting for the test", flush=True)
deadline = time.time() + 60
while not os.path.exists(MARKER) and time.time() < deadline:
    time.sleep(0.1)
print("done waiting", flush=True)
""" + FIRST_WORD


def events_of(text: str) -> list[tuple[str, dict]]:
    out = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        out.append((lines["event"], json.loads(lines["data"])))
    return out


@pytest.mark.slow  # it starts a server or a worker process
def test_a_running_jobs_log_is_followed_live_and_kept_when_it_ends(
        database, tmp_path, monkeypatch, small_dev, workspace):
    url, token = database
    marker = tmp_path / "go-on"
    tiny_registry(tmp_path, monkeypatch, {"tiny": small_dev},
                  {"waits": f"MARKER = {str(marker)!r}\n" + WAITS_FOR})
    proc, base = start_server(url)
    running = worker()
    try:
        client = Client(base, token)
        made = client.submit("waits", ["tiny"])
        [job_id] = made["jobs"]
        follow = subprocess.Popen(
            [sys.executable, "-m", "evaluator", "remote", "logs", str(job_id), "--follow",
             "--server", base, "--token", token], env=os.environ.copy(),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first = follow.stdout.readline()  # arrives while the program waits for the marker
        assert first == "started: waiting for the test\n"
        assert client.job(job_id)["state"] == "running"  # live: the job has not ended
        marker.touch()
        rest, said = follow.communicate(timeout=DEADLINE_S)
        assert follow.returncode == 0, said
        assert rest == "done waiting\n"
        assert f"job {job_id}: finished" in said
        # once ended, the stream (here the page's) gives the kept log and the end at once
        started = time.monotonic()
        streamed = httpx.get(f"{base}/pages/submissions/{made['submission']}/jobs/{job_id}/log",
                             trust_env=False, timeout=DEADLINE_S)
        assert time.monotonic() - started < 5
        assert events_of(streamed.text) == [
            ("state", {"state": "finished"}),
            ("log", {"text": "started: waiting for the test\ndone waiting\n"}),
            ("end", {"state": "finished", "failure_class": None, "message": None})]
        page = httpx.get(f"{base}/pages/submissions/{made['submission']}",
                         trust_env=False).text
        assert "started: waiting for the test\ndone waiting" in page  # kept on its page
        assert httpx.get(f"{base}/v1/jobs/{job_id}/log/stream",
                         trust_env=False).status_code == 401  # the API's needs a token
    finally:
        running.send_signal(signal.SIGTERM)
        running.wait(timeout=30)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


@pytest.mark.slow  # it starts a server or a worker process
def test_a_job_that_failed_before_anything_ran_shows_its_failure_as_its_log(
        database, tmp_path, monkeypatch, small_dev, workspace):
    url, token = database
    tiny_registry(tmp_path, monkeypatch, {"tiny": small_dev}, {})
    engine = db.connect(url)
    user = accounts.account_of(engine, token).user_id
    _, [job_id] = queue.submit(engine, user, [("gone", "tiny", {})])  # resolves no more
    ran = worker("--exit-when-idle")
    out, _ = ran.communicate(timeout=DEADLINE_S)
    assert ran.returncode == 0, out
    api = TestClient(create_app(engine, Store(workspace)))
    auth = {"Authorization": f"Bearer {token}"}
    job = api.get(f"/v1/jobs/{job_id}", headers=auth).json()
    assert job["state"] == "failed" and job["message"]
    log = api.get(f"/v1/jobs/{job_id}/log", headers=auth)
    assert log.status_code == 200
    assert log.text == f"{job['failure_class']}: {job['message']}\n"
