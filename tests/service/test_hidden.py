"""Hidden test sets: their gold answers stay in the server's scoring process. A canary planted
in a hidden set's gold is found nowhere a worker or a submission can reach; submitters see
aggregates only; an endpoint bundle is refused; changing the set's data makes exactly its
results stale. And each set's rules: who sees its results, and its own daily limit."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from evaluator.cli.main import main
from evaluator.service import boards, cells, db, queue
from evaluator.service.client import Client
from evaluator.store.store import Store
from tests import hostile
from tests.conftest import FIRST_WORD, SLURM, tiny_registry, write_testset
from tests.docker_kit import needs_docker
from tests.runners.test_slurm import cluster  # noqa: F401 - the fixture
from tests.service.test_logs import WAITS_FOR
from tests.service.test_service import DEADLINE_S, served_page, start_server, worker
from tests.support.generative import (
    Loopback,
    allow_endpoints,
    completion,
    reply,
    write_generative_bundle,
)

CANARY = f"CANARY-{uuid.uuid4().hex}"


def admin(*args: str) -> str:
    done = CliRunner().invoke(main, ["admin", *args])
    assert done.exit_code == 0, done.output
    return done.output.strip()


def admin_token() -> str:
    admin("user", "add", "olive")
    return admin("token", "create", "olive", "--scope", "admin")


def hidden_folder(root: Path, set_id: str, raw: dict, canary: str = CANARY) -> Path:
    """A test-set folder whose every question has the canary as one more gold answer."""
    planted = copy.deepcopy(raw)
    for article in planted["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                qa["answers"].append({"text": canary, "answer_start": 0})
    folder = write_testset(root, set_id, planted)
    with open(folder / "testset.yaml", "a") as spec:
        spec.write("unaligned_answers: a canary planted in the gold answers\n")
    return folder


def holding(root: Path, needle: str, skip: tuple[Path, ...] = ()) -> list[Path]:
    """The files under `root` (outside `skip`) whose bytes hold `needle`."""
    out = []
    for top, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if Path(top, d) not in skip]
        out += [Path(top, f) for f in files if not Path(top, f).is_symlink()
                and needle.encode() in Path(top, f).read_bytes()]
    return out


def wait_done(client: Client, submission: str) -> list[dict]:
    deadline = time.monotonic() + DEADLINE_S * 2
    while not (found := client.submission(submission))["done"]:
        assert time.monotonic() < deadline, found
        time.sleep(0.5)
    return found["jobs"]


def test_the_canary_hunter_finds_the_canary_where_it_can_read_it(tmp_path, small_dev):
    """The control: the program below finds the planted canary in a folder it can read."""
    folder = hidden_folder(tmp_path / "organiser", "secret", small_dev)
    bundle = hostile.bundle(tmp_path / "subs", "canary_hunt", targets={
        "halves": [CANARY[:12], CANARY[12:]], "roots": [str(folder.parent)]})
    out = tmp_path / "predictions.json"
    subprocess.run([sys.executable, "program.py", str(folder / "data.json"), str(out)],
                   cwd=bundle, check=True, capture_output=True, timeout=60)
    assert set(json.loads(out.read_text()).values()) == {str(folder / "data.json")}


@pytest.mark.slow
@needs_docker[0]
@needs_docker[1]
def test_a_hidden_sets_gold_is_found_nowhere_a_worker_or_a_submission_reaches(
        database, tmp_path, monkeypatch, small_dev, workspace):
    url, token = database
    _, subs = tiny_registry(tmp_path, monkeypatch, {}, {})
    hostile.bundle(subs, "canary_hunt", targets={"halves": [CANARY[:12], CANARY[12:]]})
    organiser = admin_token()
    added = admin("testset", "add", str(hidden_folder(tmp_path / "organiser", "secret",
                                                      small_dev)), "--hidden")
    assert added.startswith("hidden test set secret added")
    endpoint = Loopback(reply(200, completion(" the")))
    allow_endpoints(tmp_path, monkeypatch, endpoint.origin)
    write_generative_bundle(subs, "my-endpoint", endpoint=f"{{url: '{endpoint.url}', "
                            f"model: tiny, concurrency: 1}}")
    scratch = tmp_path / "scratch"  # the worker's and the server's temporary folders
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    proc, base = start_server(url)
    try:
        client = Client(base, token)
        with pytest.raises(Exception, match="the inputs of hidden test set 'secret' may not "
                                            "leave the service"):
            client.submit("my-endpoint", ["secret"])
        made = client.submit("canary_hunt", ["secret"])
        ran = worker("--exit-when-idle", runner="docker")
        out, _ = ran.communicate(timeout=DEADLINE_S * 10)
        assert ran.returncode == 0, out
        [job] = wait_done(client, made["submission"])
        assert job["state"] == "finished", job
        assert job["result"]["n"] == sum(len(p["qas"]) for a in small_dev["data"]
                                         for p in a["paragraphs"])
        history = [e["state"] for e in client.job(job["id"])["history"]]
        assert history == ["queued", "running", "scoring", "finished"]
        # the submitter sees the aggregate only; her token gets 403 on the questions
        mine = httpx.get(f"{base}/v1/jobs/{job['id']}/samples", trust_env=False,
                         headers={"Authorization": f"Bearer {token}"})
        assert mine.status_code == 403
        assert mine.json()["detail"] == ("the per-question results of hidden test set "
                                         "'secret' are for admins")
        samples = Client(base, organiser).samples(job["id"])
        assert all(CANARY in s["answers"] for s in samples)  # scored on the planted gold
        assert {s["prediction"] for s in samples} == {"nothing found"}  # the hunt found none
        page = httpx.get(f"{base}/pages/submissions/{made['submission']}",
                         trust_env=False).text
        assert CANARY not in page
        assert "secret" in served_page(base, "/pages/index.html")  # the site, built
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        endpoint.close()
    assert endpoint.requests == 0
    # nowhere a worker writes: its scratch, the store, the pages, the service's database
    assert holding(scratch, CANARY) == []
    assert holding(workspace, CANARY, skip=(workspace / boards.HIDDEN_FOLDER,)) == []
    assert CANARY.encode() not in Path(url.removeprefix("sqlite:///")).read_bytes() \
        if url.startswith("sqlite") else True
    assert holding(workspace / boards.HIDDEN_FOLDER, CANARY)  # it is there, and only there


@SLURM
def test_a_hidden_sets_job_run_through_slurm_leaves_no_gold_in_its_shared_folder(
        cluster, database, tmp_path, monkeypatch, small_dev, workspace):  # noqa: F811
    """The cell's folder on the cluster's shared file system is searched while the bundle
    runs (it is removed once the result is stored): the input is there, the gold is not."""
    url, token = database
    marker = tmp_path / "go-on"
    tiny_registry(tmp_path, monkeypatch, {}, {"waits": f"MARKER = {str(marker)!r}\n" + WAITS_FOR})
    monkeypatch.setenv("QASHIFT_SLURM_INNER", "local")
    shared = tmp_path / "slurm-shared"
    monkeypatch.setenv("QASHIFT_SLURM_DIR", str(shared))
    admin("testset", "add", str(hidden_folder(tmp_path / "organiser", "secret", small_dev)),
          "--hidden")
    proc, base = start_server(url)
    ran = worker("--exit-when-idle", runner="slurm")
    try:
        client = Client(base, token)
        made = client.submit("waits", ["secret"])
        deadline = time.monotonic() + DEADLINE_S * 5
        while not list(shared.rglob("input.json")):  # the cell is on the cluster
            assert time.monotonic() < deadline and ran.poll() is None, "no cell folder"
            time.sleep(0.2)
        time.sleep(1)
        assert holding(shared, CANARY) == []
        marker.touch()
        out, _ = ran.communicate(timeout=DEADLINE_S * 10)
        assert ran.returncode == 0, out
        [job] = wait_done(client, made["submission"])
    finally:
        marker.touch()
        if ran.poll() is None:
            ran.kill()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert job["state"] == "finished" and job["result"]["n"] > 0, job
    assert holding(workspace, CANARY, skip=(workspace / boards.HIDDEN_FOLDER,)) == []


@pytest.mark.slow  # it starts a server or a worker process
def test_changing_a_hidden_sets_data_makes_exactly_its_results_stale(
        database, tmp_path, monkeypatch, small_dev, workspace):
    url, token = database
    tiny_registry(tmp_path, monkeypatch, {"tiny": small_dev}, {"first-word": FIRST_WORD})
    organiser = tmp_path / "organiser"
    admin("testset", "add", str(hidden_folder(organiser, "secret", small_dev)), "--hidden")
    engine = db.connect(url)
    from fastapi.testclient import TestClient

    from evaluator.service.app import create_app
    from evaluator.service.scoring import score_waiting
    store = Store(workspace)
    api = TestClient(create_app(engine, store))
    auth = {"Authorization": f"Bearer {token}"}
    made = [api.post("/v1/submissions", headers=auth, json={
        "bundle": "first-word", "testsets": sets}).json() for sets in (["secret", "tiny"],)]
    ran = worker("--exit-when-idle", runner="local")
    out, _ = ran.communicate(timeout=DEADLINE_S * 5)
    assert ran.returncode == 0, out
    assert score_waiting(engine, store) == 1
    jobs = api.get(f"/v1/submissions/{made[0]['submission']}", headers=auth).json()["jobs"]
    assert [j["state"] for j in jobs] == ["finished", "finished"]
    before = {j["testset"]: j["result"] for j in jobs}
    assert cells.stale_jobs(engine, store).stale == []
    # the organiser changes the hidden set's data (one gold answer fewer)
    changed = copy.deepcopy(small_dev)
    changed["data"][0]["paragraphs"][0]["qas"][0]["answers"] = \
        changed["data"][0]["paragraphs"][0]["qas"][0]["answers"][:1]
    admin("testset", "add", str(hidden_folder(tmp_path / "again", "secret", changed)),
          "--hidden")
    stale = cells.stale_jobs(engine, store).stale
    assert [r["testset"] for r in stale] == ["secret"]
    shown = api.get(f"/v1/submissions/{made[0]['submission']}", headers=auth).json()["jobs"]
    assert {j["testset"]: j["stale"] for j in shown} == {"secret": True, "tiny": False}
    page = api.get(f"/pages/submissions/{made[0]['submission']}").text
    assert page.count("stale: scored on test-set bytes") == 1
    submissions = {r["submission"] for r in queue.every_job(engine)}
    assert admin("rerun", "--stale").startswith("1 stale jobs queued again")
    assert {r["submission"] for r in queue.every_job(engine)} == submissions
    ran = worker("--exit-when-idle", runner="local")
    out, _ = ran.communicate(timeout=DEADLINE_S * 5)
    assert ran.returncode == 0, out
    assert score_waiting(engine, store) == 1
    rows = Store(workspace).results()
    assert len(rows) == 3  # the old row of the hidden set stays beside the new
    assert before["secret"]["key"] in {r["key"] for r in rows}
    assert cells.stale_jobs(engine, store).stale == []
    shown = api.get(f"/v1/submissions/{made[0]['submission']}", headers=auth).json()["jobs"]
    assert [(j["testset"], j["state"], j["stale"]) for j in shown] == [
        ("secret", "finished", False), ("tiny", "finished", False),
        ("secret", "finished", False)]  # the old job's result stays, superseded
    assert "stale: scored on" not in api.get(f"/pages/submissions/{made[0]['submission']}").text


@pytest.mark.slow  # it starts a server or a worker process
def test_a_sets_rules_say_who_sees_its_results_and_how_often_one_may_submit(
        database, tmp_path, monkeypatch, small_dev, workspace):
    url, token = database
    tiny_registry(tmp_path, monkeypatch, {"tiny": small_dev}, {"first-word": FIRST_WORD})
    organiser = admin_token()
    shown = json.loads(admin("testset", "rules", "tiny", "--visibility", "admins",
                             "--daily-limit", "2"))
    assert shown["visibility"] == "admins" and shown["daily_limit"] == 2
    engine = db.connect(url)
    from fastapi.testclient import TestClient

    from evaluator.service.app import create_app
    api = TestClient(create_app(engine, Store(workspace)))
    auth = {"Authorization": f"Bearer {token}"}
    made = api.post("/v1/submissions", headers=auth,
                    json={"bundle": "first-word", "testsets": ["tiny"]}).json()
    ran = worker("--exit-when-idle", runner="local")
    out, _ = ran.communicate(timeout=DEADLINE_S * 5)
    assert ran.returncode == 0, out
    [job] = api.get(f"/v1/submissions/{made['submission']}", headers=auth).json()["jobs"]
    assert job["state"] == "finished" and job["result"] is None
    assert job["result_hidden"] == "results on test set 'tiny' are shown to its organisers only"
    assert api.get("/v1/results").json() == []  # nor among every cell's results
    [listed] = api.get("/v1/testsets").json()
    assert (listed["id"], listed["visibility"], listed["hidden"]) == ("tiny", "admins", False)
    page = api.get(f"/pages/submissions/{made['submission']}").text
    assert "shown to its organisers only" in page and "[" not in page.split("<tbody>")[1][:400]
    [seen] = api.get(f"/v1/submissions/{made['submission']}",
                     headers={"Authorization": f"Bearer {organiser}"}).json()["jobs"]
    assert seen["result"]["n"] > 0
    admin("testset", "rules", "tiny", "--visibility", "after", "--after", "2020-01-01")
    [job] = api.get(f"/v1/submissions/{made['submission']}", headers=auth).json()["jobs"]
    assert job["result"] == seen["result"]
    admin("testset", "rules", "tiny", "--visibility", "after", "--after", "2099-01-01")
    [job] = api.get(f"/v1/submissions/{made['submission']}", headers=auth).json()["jobs"]
    assert job["result_hidden"] == "results on test set 'tiny' are shown from 2099-01-01 00:00 UTC"
    # its own daily limit: the second is accepted (stored: answered at once), the third not
    second = api.post("/v1/submissions", headers=auth,
                      json={"bundle": "first-word", "testsets": ["tiny"]})
    assert second.status_code == 201
    third = api.post("/v1/submissions", headers=auth,
                     json={"bundle": "first-word", "testsets": ["tiny"]})
    assert third.status_code == 429 and third.headers["retry-after"]
    assert third.json()["detail"].startswith("2 of 2 submissions today to test set tiny")
