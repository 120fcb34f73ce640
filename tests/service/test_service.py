"""The submission service, with a real server (uvicorn on a loopback port), a real SQLite
database and real workers: tokens kept only as hashes and accepted only in the header; a
submission over HTTP gives the numbers `evaluate` gives; a stored cell is answered at once;
a worker killed while its job runs leaves the job to the next, which ends it once."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from sqlalchemy import select

from evaluator.cli.main import evaluate_cmd
from evaluator.service import accounts, db, queue
from evaluator.service.client import Client
from evaluator.store.store import Store
from tests.conftest import FIRST_WORD, tiny_registry

DEADLINE_S = 60  # every wait on a server or a worker is bounded


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(url: str) -> tuple[subprocess.Popen, str]:
    """`qashift serve` on a free loopback port, once it answers; (the process, its URL)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "evaluator", "serve", "--port", str(port),
                             "--db", url], env=os.environ.copy(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + DEADLINE_S
    while True:
        try:
            if httpx.get(f"{base}/v1/healthz", timeout=2, trust_env=False).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            pass
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline, "the server did not answer"
        time.sleep(0.2)


@pytest.fixture
def server(database):
    """`qashift serve` on the database; (its URL, the database URL, a token)."""
    url, token = database
    proc, base = start_server(url)
    yield base, url, token
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)


def worker(*flags: str, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "evaluator", "worker", "--runner", "local",
                             *flags], env=os.environ.copy(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, **popen)


def test_a_token_only_in_the_header_and_only_its_hash_kept(server):
    base, url, token = server
    assert httpx.get(f"{base}/v1/healthz", trust_env=False).json()["ok"] is True
    body = {"bundle": "bert-ensemble", "testsets": ["squad-dev"]}
    bare = httpx.post(f"{base}/v1/submissions", json=body, trust_env=False)
    assert bare.status_code == 401
    assert bare.json() == {"detail": "no token: send Authorization: Bearer TOKEN"}
    in_url = httpx.post(f"{base}/v1/submissions", params={"token": token}, json=body,
                        headers={"Authorization": f"Bearer {token}"}, trust_env=False)
    assert in_url.status_code == 401 and "never in the URL" in in_url.json()["detail"]
    wrong = httpx.post(f"{base}/v1/submissions", json=body, trust_env=False,
                       headers={"Authorization": "Bearer qs_not-a-token"})
    assert wrong.status_code == 401 and wrong.json()["detail"] == "unknown token"
    with db.connect(url).connect() as conn:
        kept = [dict(r) for r in conn.execute(select(db.tokens)).mappings()]
    assert [r["sha256"] for r in kept] == [accounts.digest(token)]
    assert token not in json.dumps(kept)
    if url.startswith("sqlite:///"):  # nor anywhere in the file
        assert token not in Path(url[10:]).read_bytes().decode(errors="replace")
    unknown = Client(base, token)
    with pytest.raises(Exception, match="answered 422: unknown bundle 'no-such-bundle'"):
        unknown.submit("no-such-bundle", ["squad-dev"])


def test_a_submission_over_http_gives_the_numbers_evaluate_gives(server, workspace):
    base, url, token = server
    running = worker()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "evaluator", "remote", "submit", "bert-ensemble", "-t",
             "squad-dev", "--wait", "--json", "--server", base, "--token", token],
            env=os.environ.copy(), capture_output=True, text=True, timeout=DEADLINE_S * 5)
    finally:
        running.send_signal(signal.SIGTERM)
        running.wait(timeout=30)
    assert done.returncode == 0, done.stderr
    [remote] = json.loads(done.stdout)["results"]
    assert (round(remote["em"]["value"], 3), round(remote["f1"]["value"], 3)) == \
        (86.206, 92.196)
    local = CliRunner().invoke(evaluate_cmd, ["-b", "bert-ensemble", "-t", "squad-dev",
                                              "--json"])
    [cli] = json.loads(local.stdout)["results"]
    for field in ("bundle", "testset", "n", "missing", "em", "f1", "scorer", "key"):
        assert remote[field] == cli[field], field
    # asked again, the stored cell is answered at once: no worker runs
    client = Client(base, token)
    again = client.submission(client.submit("bert-ensemble", ["squad-dev"])["submission"])
    assert again["done"] and again["jobs"][0]["state"] == "finished"
    assert again["jobs"][0]["result"]["key"] == cli["key"]
    job = client.job(again["jobs"][0]["id"])
    assert [e["state"] for e in job["history"]] == ["queued", "finished"]
    assert "nothing run" in job["history"][1]["note"]
    with pytest.raises(Exception, match=r"answered 409: job \d+ has ended \(finished\)"):
        client.cancel(job["id"])
    assert len(Store(workspace).results()) == 1


def test_a_worker_killed_mid_job_leaves_it_to_the_next_which_ends_it_once(
        server, tmp_path, monkeypatch, small_dev, workspace):
    base, url, token = server
    marker = tmp_path / "first-attempt-started"
    program = (f"import os, time\nmarker = {str(marker)!r}\n"
               "if not os.path.exists(marker):\n"
               "    open(marker, 'w').close()\n"
               "    time.sleep(120)\n" + FIRST_WORD)
    tiny_registry(tmp_path, monkeypatch, {"tiny": small_dev}, {"slow-once": program})
    # the server reads the registry when it plans: submit through the queue, as it would
    engine = db.connect(url)
    user = accounts.account_of(engine, token).user_id
    submission, [job_id] = queue.submit(engine, user, [("slow-once", "tiny", {})])
    first = worker("--lease", "2")
    deadline = time.monotonic() + DEADLINE_S
    while not marker.exists():
        assert time.monotonic() < deadline and first.poll() is None, first.stdout.read()
        time.sleep(0.2)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    time.sleep(3)  # its lease (2 s) lapses
    second = worker("--lease", "2", "--exit-when-idle")
    out, _ = second.communicate(timeout=DEADLINE_S * 2)
    assert second.returncode == 0, out
    job = queue.job(engine, job_id)
    assert job["state"] == "finished" and job["attempts"] == 2, job
    states = [e["state"] for e in queue.history(engine, job_id)]
    assert states == ["queued", "running", "running", "finished"], states
    assert "lease lapsed" in queue.history(engine, job_id)[2]["note"]
    assert [r["key"] for r in Store(workspace).results()] == [job["result_key"]]
    # the first worker, were it alive, could not end the job a second time
    assert not queue.finish(engine, job_id, "first-worker", result_key=job["result_key"])


def test_fifty_submissions_at_once_to_four_workers_run_each_cell_once(
        database, tmp_path, monkeypatch, small_dev, workspace):
    """On SQLite: every submission accepted while others are written, no "database is
    locked", and each cell's program started exactly once however the workers race."""
    url, token = database
    runs = tmp_path / "runs.log"
    program = ("import os, sys\n"
               f"open({str(runs)!r}, 'a').write(sys.argv[3] + '\\n')\n" + FIRST_WORD)
    bundles = {f"b{k:02d}": program for k in range(50)}
    sets, subs = tiny_registry(tmp_path, monkeypatch, {"tiny": small_dev}, bundles)
    for name in bundles:  # each program told its own name: python3 program.py IN OUT NAME
        yaml_path = subs / name / "bundle.yaml"
        yaml_path.write_text(yaml_path.read_text().replace(
            "{input} {output}", f"{{input}} {{output}} {name}"))
    proc, base = start_server(url)
    try:
        def send(name: str) -> int:
            return httpx.post(f"{base}/v1/submissions", json={"bundle": name,
                              "testsets": ["tiny"]}, headers={"Authorization": f"Bearer "
                              f"{token}"}, timeout=DEADLINE_S, trust_env=False).status_code

        with ThreadPoolExecutor(max_workers=50) as pool:
            codes = list(pool.map(send, sorted(bundles)))
        assert codes == [201] * 50
        workers = [worker("--exit-when-idle") for _ in range(4)]
        outs = [w.communicate(timeout=DEADLINE_S * 5)[0] for w in workers]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert all(w.returncode == 0 for w in workers), outs
    assert not any("locked" in out for out in outs), outs
    engine = db.connect(url)
    with engine.connect() as conn:
        states = [r.state for r in conn.execute(select(db.jobs.c.state))]
    assert states == ["finished"] * 50
    started = runs.read_text().split()
    assert sorted(started) == sorted(bundles)  # each cell's program started once
    assert len(Store(workspace).results()) == 50
    assert sum(int(out.rsplit(" jobs ended", 1)[0].split()[-1]) for out in outs) == 50
