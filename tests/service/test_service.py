"""The submission service, with a real server (uvicorn on a loopback port), a real SQLite
database and real workers: tokens kept only as hashes and accepted only in the header; a
submission over HTTP gives the numbers `evaluate` gives; a stored cell is answered at once;
a worker killed while its job runs leaves the job to the next, which ends it once."""

from __future__ import annotations

import json
import os
import shutil
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
from tests.conftest import FIRST_WORD, REPO, SLURM, tiny_registry
from tests.runners.test_slurm import cluster  # noqa: F401 - the fixture
from tests.support.generative import (
    Loopback,
    allow_endpoints,
    completion,
    reply,
    write_generative_bundle,
)

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


def worker(*flags: str, runner: str = "local", **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "evaluator", "worker", "--runner", runner,
                             *flags], env=os.environ.copy(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, **popen)


@pytest.mark.slow  # it starts a server or a worker process
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


@pytest.mark.slow  # it starts a server or a worker process
def test_a_submission_over_http_gives_the_numbers_evaluate_gives(server, workspace):
    base, url, token = server
    running = worker()
    try:
        done = subprocess.run(  # the predictions bundle's folder, uploaded
            [sys.executable, "-m", "evaluator", "remote", "submit", "submissions/bert-ensemble",
             "-t", "squad-dev", "--wait", "--json", "--server", base, "--token", token],
            env=os.environ.copy(), capture_output=True, text=True, timeout=DEADLINE_S * 5,
            cwd=REPO)
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
    # the submission's own page: its job, result with intervals, and provenance
    page = httpx.get(f"{base}/pages/submissions/{again['submission']}", trust_env=False).text
    assert "86.206 [" in page and "92.196 [" in page and cli["key"] not in page
    assert f"<code>{Store(workspace).results()[0]['bundle_digest']}</code>" in page
    assert httpx.get(f"{base}/pages/submissions/0123456789abcdef",
                     trust_env=False).status_code == 404
    # the store's site, served live: built once the store holds the result
    page = served_page(base, "/pages/testsets/squad-dev.html")
    assert "BERT (ensemble)" in page and "86.206" in page and "92.196" in page
    assert httpx.get(f"{base}/", trust_env=False, follow_redirects=True).status_code == 200
    for outside in ("/pages/..%2fservice.sqlite", "/pages/%2e%2e/results.sqlite"):
        assert httpx.get(base + outside, trust_env=False).status_code == 404


def served_page(base: str, path: str) -> str:
    """A page of the server's site, once built (503 until then)."""
    deadline = time.monotonic() + DEADLINE_S * 2
    while True:
        reply = httpx.get(base + path, trust_env=False, timeout=DEADLINE_S)
        if reply.status_code != 503:
            assert reply.status_code == 200, reply.text[:300]
            return reply.text
        assert reply.headers["retry-after"] and time.monotonic() < deadline, reply.text
        time.sleep(0.5)


@pytest.mark.slow  # it starts a server or a worker process
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


@pytest.mark.slow  # it starts a server or a worker process
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


def remote(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evaluator", "remote", *args],
                          env=os.environ.copy(), capture_output=True, text=True,
                          timeout=DEADLINE_S * 2)


@pytest.mark.slow  # it starts a server or a worker process
def test_a_server_killed_mid_job_loses_nothing_and_logs_are_served_when_jobs_end(
        database, tmp_path, monkeypatch, small_dev, workspace):
    """`kill -9` of the server while a worker runs a job: the worker ends the job without it,
    and a server started again shows the job ended once, its history and its log; a failed
    job's log is its run's own output."""
    url, token = database
    slow = ("import sys, time\nprint('the slow run says hello', file=sys.stderr)\n"
            "time.sleep(3)\n" + FIRST_WORD)
    failing = "import sys\nprint('the failing run gives up', file=sys.stderr)\nsys.exit(3)\n"
    tiny_registry(tmp_path, monkeypatch, {"tiny": small_dev}, {"slow": slow, "fails": failing})
    proc, base = start_server(url)
    client = Client(base, token)
    [slow_job] = client.submit("slow", ["tiny"])["jobs"]
    running = worker("--exit-when-idle")
    deadline = time.monotonic() + DEADLINE_S
    while client.job(slow_job)["state"] != "running":
        assert time.monotonic() < deadline and running.poll() is None
        time.sleep(0.1)
    with pytest.raises(Exception, match=r"answered 409: job \d+ is running"):
        client.log(slow_job)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    out, _ = running.communicate(timeout=DEADLINE_S * 2)
    assert running.returncode == 0, out
    proc, base = start_server(url)
    try:
        client = Client(base, token)
        job = client.job(slow_job)
        assert job["state"] == "finished" and job["attempts"] == 1
        assert [e["state"] for e in job["history"]] == ["queued", "running", "finished"]
        logs = remote("logs", str(slow_job), "--follow", "--server", base, "--token", token)
        assert logs.returncode == 0 and "the slow run says hello" in logs.stdout, logs
        [failed_job] = client.submit("fails", ["tiny"])["jobs"]
        ran = worker("--exit-when-idle")
        ran.communicate(timeout=DEADLINE_S * 2)
        submission = client.job(failed_job)["submission"]
        status = remote("status", submission, "--server", base, "--token", token)
        assert status.returncode == 0 and "failed, attempt 1 (" in status.stdout, status
        results = remote("results", submission, "--server", base, "--token", token)
        assert results.returncode == 1 and "1 of 1 jobs failed" in results.stderr, results
        assert "the failing run gives up" in client.log(failed_job)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert len(Store(workspace).results()) == 1


@pytest.mark.slow
def test_each_kind_of_bundle_folder_is_uploaded_and_scored_over_http(
        database, tmp_path, monkeypatch, few_dev, workspace, tiny_model, tiny_lm):
    """An hf-qa checkpoint, a local generative model and an endpoint bundle, each a folder
    uploaded by `remote submit FOLDER`'s client, finish over HTTP with their results (a
    command bundle's upload is tests/service/test_uploads.py's)."""
    url, token = database
    tiny_registry(tmp_path, monkeypatch, {"tiny": few_dev}, {})
    endpoint = Loopback(reply(200, completion(" the")))
    allow_endpoints(tmp_path, monkeypatch, endpoint.origin)
    mine = tmp_path / "mine"
    shutil.copytree(tiny_model, mine / "my-checkpoint" / "model")
    (mine / "my-checkpoint" / "bundle.yaml").write_text(
        "id: my-checkpoint\nname: my checkpoint\nkind: hf-qa\nmodel: {path: model}\n")
    shutil.copytree(tiny_lm, mine / "my-lm" / "model")
    (mine / "my-lm" / "bundle.yaml").write_text(
        "id: my-lm\nname: my lm\nkind: generative\nmodel: {path: model}\n"
        "generation: {max_new_tokens: 6, stop: []}\nresources: {timeout: 300}\n")
    write_generative_bundle(mine, "my-endpoint", endpoint=f"{{url: '{endpoint.url}', "
                            f"model: tiny, concurrency: 1}}")
    proc, base = start_server(url)
    try:
        client = Client(base, token)
        submissions = {}
        for name in ("my-checkpoint", "my-lm", "my-endpoint"):
            sent = client.upload(mine / name)
            submissions[name] = client.submit(sent["bundle"], ["tiny"],
                                              upload=sent["upload"])["submission"]
        ran = worker("--exit-when-idle")
        out, _ = ran.communicate(timeout=DEADLINE_S * 5)
        assert ran.returncode == 0, out
        for name, submission in submissions.items():
            [job] = client.submission(submission)["jobs"]
            assert job["state"] == "finished", (name, job)
            assert job["result"]["bundle"] == name and job["result"]["n"] > 0
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        endpoint.close()
    assert endpoint.requests > 0  # the endpoint bundle asked its server


@SLURM
def test_a_worker_running_its_jobs_through_slurm_gives_the_numbers_evaluate_gives(
        cluster, database, tmp_path, monkeypatch, small_dev, workspace):  # noqa: F811
    """`qashift worker --runner slurm`: the cluster is the distributed engine; the job's cell
    runs as a Slurm job and scores as the local runner scores it."""
    url, token = database
    tiny_registry(tmp_path, monkeypatch, {"tiny": small_dev}, {"first-word": FIRST_WORD})
    monkeypatch.setenv("QASHIFT_SLURM_INNER", "local")
    proc, base = start_server(url)
    try:
        client = Client(base, token)
        made = client.submit("first-word", ["tiny"])
        ran = worker("--exit-when-idle", runner="slurm")
        out, _ = ran.communicate(timeout=DEADLINE_S * 10)
        assert ran.returncode == 0, out
        [job] = client.submission(made["submission"])["jobs"]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert job["state"] == "finished", job
    [row] = Store(workspace).results()
    assert row["runner"] == "slurm"
    monkeypatch.setenv("QASHIFT_WORKSPACE", str(tmp_path / "elsewhere"))
    local = CliRunner().invoke(evaluate_cmd, ["-b", "first-word", "-t", "tiny", "--runner",
                                              "local", "--json"])
    [cli] = json.loads(local.stdout)["results"]
    for field in ("n", "missing", "em", "f1", "key"):
        assert job["result"][field] == cli[field], field
