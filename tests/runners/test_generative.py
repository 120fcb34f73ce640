"""Generative bundles: a local Transformers model and the same model behind an
OpenAI-compatible server (`transformers serve`, started here on the loopback address) give the
same answers; each run keeps every question's generation; the prompt is part of the cell; an
endpoint run that is killed resumes without asking an answered question twice; a bad endpoint
fails its cell with a class and one line while the matrix goes on; the API key is sent and
kept nowhere."""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

import evaluator
from evaluator.cli.figures import report_command
from evaluator.cli.main import evaluate_cmd
from evaluator.runners.docker import daemon_available
from evaluator.runners.slurm.controller import cluster_available
from evaluator.store.store import Store
from tests.conftest import SLURM, tiny_registry
from tests.support.generative import Misbehaving, allow_endpoints, write_generative_bundle
from tests.tiny_bert import subset


@pytest.fixture
def roots(tmp_path, monkeypatch, workspace, dev_raw):
    """A test set 'few' (one question of each paragraph of SQuAD dev's first article) and an
    empty submissions root."""
    return tiny_registry(tmp_path, monkeypatch, {"few": subset(dev_raw, slice(0, 1), 1)}, {})


def evaluate(*args: str, runner: str = "local") -> tuple[int, dict]:
    result = CliRunner().invoke(evaluate_cmd, [*args, "--runner", runner, "--json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, json.loads(result.stdout)


def endpoint(url: str, model: str, extra: str = "") -> str:
    return f"{{url: '{url}', model: '{model}', concurrency: 1{extra}}}"


def stored(workspace: Path, bundle: str) -> tuple[dict, dict]:
    """(predictions, generations) of a bundle's stored run on 'few'."""
    store = Store(workspace)
    [row] = store.results(bundle=bundle)
    record = json.loads(row["run_record"])
    return (json.loads(store.get_object(row["predictions_sha256"])),
            json.loads(store.get_object(record["details"]["generations_sha256"])))


def test_a_local_model_and_the_same_model_served_answer_alike(roots, tiny_lm, served,
                                                              workspace, tmp_path, monkeypatch):
    _, subs = roots
    allow_endpoints(tmp_path, monkeypatch, served.origin)
    write_generative_bundle(subs, "local-lm", model=tiny_lm)
    write_generative_bundle(subs, "served-lm", endpoint=endpoint(served.url, str(tiny_lm)))
    code, doc = evaluate("-b", "local-lm", "-b", "served-lm", "-t", "few")
    assert code == 0, doc
    assert sorted(r["bundle"] for r in doc["results"]) == ["local-lm", "served-lm"]
    local, local_text = stored(workspace, "local-lm")
    remote, remote_text = stored(workspace, "served-lm")
    assert len(local) == 54 and local == remote
    assert local_text == remote_text
    for qid, answer in local.items():
        assert local_text[qid]["answer"] == answer
        assert local_text[qid]["generation"].strip()  # the raw text, before extraction


@pytest.mark.skipif(not daemon_available(), reason="no Docker daemon answers")
@pytest.mark.usefixtures("no_container_left_behind")
def test_a_local_model_answers_alike_in_the_runner_image(roots, tiny_lm, client, workspace):
    answers_alike_under(roots, tiny_lm, workspace, "docker")


@SLURM
@pytest.mark.slow
def test_a_local_model_answers_alike_as_a_slurm_job(roots, tiny_lm, workspace):
    reason = cluster_available()
    if reason:
        pytest.skip(f"no Slurm cluster: {reason}")
    answers_alike_under(roots, tiny_lm, workspace, "slurm")


def answers_alike_under(roots, tiny_lm: Path, workspace: Path, runner: str) -> None:
    """The same local model as two bundles: one run here, one under `runner`; the same
    answers and generations, and the run says which runner made it."""
    _, subs = roots
    write_generative_bundle(subs, "here", model=tiny_lm)
    write_generative_bundle(subs, "there", model=tiny_lm)
    assert evaluate("-b", "here", "-t", "few")[0] == 0
    code, doc = evaluate("-b", "there", "-t", "few", runner=runner)
    assert code == 0, doc
    assert doc["results"][0]["runner"] == runner
    assert stored(workspace, "there") == stored(workspace, "here")


def test_the_prompt_is_part_of_the_cell(roots, tiny_lm):
    _, subs = roots
    folder = write_generative_bundle(subs, "lm", model=tiny_lm)
    first = evaluate("-b", "lm", "-t", "few")[1]["results"][0]
    assert evaluate("-b", "lm", "-t", "few")[1]["results"][0]["cached"]
    yaml = folder / "bundle.yaml"
    yaml.write_text(yaml.read_text() + "prompt: {template: 'Q: {question}\\nC: {context}\\nA:'}\n")
    again = evaluate("-b", "lm", "-t", "few")[1]["results"][0]
    assert not again["cached"] and again["key"] != first["key"]


def test_a_killed_endpoint_run_asks_no_answered_question_again(roots, tiny_lm, served,
                                                               workspace, tmp_path,
                                                               monkeypatch):
    _, subs = roots
    allow_endpoints(tmp_path, monkeypatch, served.origin)
    write_generative_bundle(subs, "served", endpoint=endpoint(served.url, str(tiny_lm)))
    before = served.completions_answered()
    argv = [sys.executable, "-m", "evaluator", "evaluate", "-b", "served", "-t", "few",
            "--runner", "local", "--json"]
    proc = subprocess.Popen(argv, env=dict(os.environ), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    responses = workspace / "responses"
    deadline = time.monotonic() + 120
    while len(list(responses.glob("*/*.json"))) < 10:
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended early"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    kept = len(list(responses.glob("*/*.json")))
    assert 10 <= kept < 54
    asked_first = served.completions_answered() - before
    code, doc = evaluate("-b", "served", "-t", "few")
    assert code == 0 and doc["results"][0]["n"] == 54
    asked_again = served.completions_answered() - before - asked_first
    assert asked_again == 54 - kept
    assert asked_first <= kept + 1  # at most the one in flight was answered but not kept


def test_a_bad_endpoint_fails_its_cell_in_one_line_and_the_matrix_goes_on(roots, tiny_lm,
                                                                           served, tmp_path,
                                                                           monkeypatch):
    _, subs = roots
    failing = Misbehaving(500, b'{"error": {"message": "overloaded"}}')
    huge = Misbehaving(200, json.dumps({"choices": [{"text": "x" * (2 << 20)}]}).encode())
    closed = Misbehaving(200, b"{}")
    closed.close()  # nothing listens on its port any more
    allow_endpoints(tmp_path, monkeypatch, served.origin, failing.origin, huge.origin,
                    closed.origin)
    try:
        write_generative_bundle(subs, "refused", endpoint=endpoint(closed.url, "m",
                                                                   ", retries: 1"))
        write_generative_bundle(subs, "failing", endpoint=endpoint(failing.url, "m",
                                                                   ", retries: 2"))
        write_generative_bundle(subs, "unknown-model", endpoint=endpoint(served.url, "nope"))
        write_generative_bundle(subs, "huge", endpoint=endpoint(huge.url, "m"))
        write_generative_bundle(subs, "fine", model=tiny_lm)
        code, doc = evaluate("-b", "refused", "-b", "failing", "-b", "unknown-model",
                             "-b", "huge", "-b", "fine", "-t", "few")
    finally:
        failing.close()
        huge.close()
    assert code != 0
    assert [r["bundle"] for r in doc["results"]] == ["fine"]
    classes = {f["bundle"]: f["failure_class"] for f in doc["failed"]}
    assert classes == {"refused": "endpoint-unreachable", "failing": "endpoint-error",
                       "unknown-model": "endpoint-refused", "huge": "output-too-large"}
    assert len(failing.authorizations) == 3  # the first try and two retries
    for failure in doc["failed"]:
        assert "\n" not in failure["message"] and len(failure["message"]) < 400
    failed = next(f["message"] for f in doc["failed"] if f["bundle"] == "failing")
    assert "HTTP 500" in failed and "overloaded" not in failed  # the reply is never shown


def test_the_api_key_is_sent_and_kept_nowhere(roots, workspace, monkeypatch, tmp_path):
    """Not in the store (rows, objects, kept responses), the output, results.json, the
    per-question logs or the site built from the store."""
    _, subs = roots
    key = f"sk-test-{uuid.uuid4().hex}"
    monkeypatch.setenv("QASHIFT_TEST_API_KEY", key)
    server = Misbehaving(200, json.dumps({"choices": [{"text": " Denver\n"}]}).encode())
    allow_endpoints(tmp_path, monkeypatch, server.origin,
                    keys={"QASHIFT_TEST_API_KEY": server.url})
    try:
        write_generative_bundle(subs, "keyed", endpoint=endpoint(
            server.url, "m", ", api_key_env: QASHIFT_TEST_API_KEY"))
        result = CliRunner().invoke(evaluate_cmd, ["-b", "keyed", "-t", "few", "--runner",
                                                   "local", "--json", "--output-path",
                                                   str(tmp_path / "out"), "--log-samples"])
        listing = CliRunner().invoke(evaluate_cmd, ["-b", "keyed", "-t", "few", "--runner",
                                                    "local"])
    finally:
        server.close()
    assert result.exit_code == 0, result.output
    site = CliRunner().invoke(report_command, ["--source", "store", "--out",
                                               str(tmp_path / "site")])
    assert site.exit_code == 0, site.output
    assert (tmp_path / "out" / "samples" / "keyed.few.jsonl").is_file()
    assert any((tmp_path / "site").rglob("*.html"))
    assert server.authorizations and set(server.authorizations) == {f"Bearer {key}"}
    assert key not in result.output and key not in listing.output
    for path in [*workspace.rglob("*"), *tmp_path.rglob("*")]:
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path
    monkeypatch.delenv("QASHIFT_TEST_API_KEY")
    assert evaluate("-b", "keyed", "-t", "few", "--rerun")[0] == 0  # answered: not asked again
    shutil.rmtree(workspace / "responses")
    _, doc = evaluate("-b", "keyed", "-t", "few", "--rerun")
    [failure] = doc["failed"]
    assert failure["failure_class"] == "endpoint-refused"
    assert "QASHIFT_TEST_API_KEY" in failure["message"]


@pytest.mark.parametrize("granted", [None, "http://127.0.0.1:1/v1"])
def test_a_key_the_operator_did_not_grant_to_the_endpoint_is_never_sent(
        roots, workspace, monkeypatch, tmp_path, granted):
    """A bundle names both the variable and the URL, so without the policy's grant any
    secret of the controller's environment could go to a server of the bundle's."""
    _, subs = roots
    monkeypatch.setenv("QASHIFT_TEST_SECRET", "operator-secret")
    server = Misbehaving(200, json.dumps({"choices": [{"text": " Denver\n"}]}).encode())
    allow_endpoints(tmp_path, monkeypatch, server.origin,  # the origin, not the key
                    keys={"QASHIFT_TEST_SECRET": granted} if granted else {})  # another port
    try:
        write_generative_bundle(subs, "greedy", endpoint=endpoint(
            server.url, "m", ", api_key_env: QASHIFT_TEST_SECRET"))
        _, doc = evaluate("-b", "greedy", "-t", "few")
    finally:
        server.close()
    [failure] = doc["failed"]
    assert failure["failure_class"] == "endpoint-refused"
    assert "policy does not let QASHIFT_TEST_SECRET be sent to" in failure["message"]
    assert server.authorizations == []  # not one request left


def test_prompt_sensitivity_runs_every_template_and_reports_the_spread(roots, tiny_lm):
    _, subs = roots
    write_generative_bundle(subs, "lm", model=tiny_lm)
    templates = ["Context: {context}\nQuestion: {question}\nAnswer:",
                 "Question: {question}\nPassage: {context}\nShort answer:", "{question}"]
    flags = sum((["--template", t] for t in templates), [])
    code, doc = evaluate("-b", "lm", "-t", "few", *flags)
    assert code == 0, doc
    cells = {r["bundle"]: r for r in doc["results"]}
    assert len(cells) == 3 and all(b.startswith("lm+p") for b in cells)
    assert len({r["key"] for r in cells.values()}) == 3
    [spread] = doc["prompt_spread"]
    assert (spread["bundle"], spread["testset"]) == ("lm", "few")
    f1 = [cells[t["bundle"]]["f1"]["value"] for t in spread["templates"]]
    assert [t["template"] for t in spread["templates"]] == templates
    assert spread["f1"]["n"] == 3 and spread["f1"]["range"] == max(f1) - min(f1)
    assert spread["f1"]["sd"] == pytest.approx(statistics.stdev(f1))
    assert spread["f1"]["mean"] == pytest.approx(statistics.mean(f1))
    rows = evaluator.evaluate(bundles=["lm"], testsets=["few"], runner="local",
                              templates=templates).frame()
    assert sorted(rows["key"]) == sorted(r["key"] for r in cells.values())
    assert all(rows["cached"])
    bad = CliRunner().invoke(evaluate_cmd, ["-b", "lm", "-t", "few", "--runner", "local",
                                            "--template", "{passage}"])
    assert bad.exit_code != 0 and "only {context} and {question} are filled in" in bad.output
