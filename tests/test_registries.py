"""What a newcomer adds in one module and one registration: a runner backend (offered by every
command's --runner and run by `evaluate`) and a scorer (named by a test set's `scorer:` and
stored under its version); both are read from their registries, not written out per command."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from evaluator import scoring
from evaluator.cli.main import evaluate_cmd, main
from evaluator.runners import dispatch
from evaluator.store.store import Store
from tests.conftest import SLIDING_WINDOW, tiny_registry, write_testset

TOY_BACKEND = '''
import json, time
from evaluator.runners.base import RunRecord

class ToyRunner:
    """Answers every question with its passage's first word, in this process."""
    name = "toy"

    def run(self, request):
        start = time.perf_counter()
        doc = json.loads(request.input_path.read_text())
        request.output_path.write_text(json.dumps(
            {q["id"]: p["context"].split()[0] for a in doc["data"]
             for p in a["paragraphs"] for q in p["qas"]}))
        return RunRecord(runner=self.name, wall_s=time.perf_counter() - start, exit_code=0)
'''

TOY_SCORER = '''
from evaluator.scoring import register

def exact_as_written(prediction, answers):
    """EM and F1 without normalising: case, punctuation and articles count."""
    hit = prediction is not None and prediction in answers
    return (int(hit), float(hit))

register("as-written", version="as-written/1", question=exact_as_written)(None)
'''


@pytest.fixture
def registries(monkeypatch, tmp_path):
    """The registries as they are, restored after the test; `tmp_path` importable."""
    monkeypatch.setattr(dispatch, "RUNNERS", dict(dispatch.RUNNERS))
    monkeypatch.setattr(scoring, "_REGISTRY", dict(scoring.scorers()))
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_a_runner_backend_is_one_module_and_one_registration(registries, tmp_path,
                                                             monkeypatch, small_dev,
                                                             workspace):
    (registries / "toy_backend.py").write_text(TOY_BACKEND)
    dispatch.register_backend("toy", {"command": "toy_backend:ToyRunner"})
    assert "toy" in CliRunner().invoke(evaluate_cmd, ["--help"]).output
    assert "toy" in CliRunner().invoke(main, ["study", "run", "--help"]).output
    tiny_registry(tmp_path, monkeypatch, {"tiny": small_dev}, {"sliding-window": SLIDING_WINDOW})
    done = CliRunner().invoke(evaluate_cmd, ["-b", "sliding-window", "-t", "tiny", "--runner",
                                             "toy", "--json"])
    assert done.exit_code == 0, done.output
    [result] = json.loads(done.stdout)["results"]
    assert result["runner"] == "toy" and result["n"] > 0 and result["f1"]["value"] >= 0
    unknown = CliRunner().invoke(evaluate_cmd, ["-b", "sliding-window", "-t", "tiny",
                                                 "--runner", "no"])
    assert unknown.exit_code != 0 and "toy" in unknown.output  # among the choices named


def test_a_scorer_is_one_module_and_one_registration(registries, tmp_path, monkeypatch,
                                                     small_dev, workspace):
    (registries / "toy_scorer.py").write_text(TOY_SCORER)
    __import__("toy_scorer")
    assert scoring.get("as-written").version == "as-written/1"
    sets, _ = tiny_registry(tmp_path, monkeypatch, {"tiny": small_dev},
                            {"sliding-window": SLIDING_WINDOW})
    write_testset(sets, "tiny-as-written", small_dev, scorer="as-written")
    done = CliRunner().invoke(evaluate_cmd, ["-b", "sliding-window", "-t", "tiny", "-t",
                                             "tiny-as-written", "--runner", "local", "--json"])
    assert done.exit_code == 0, done.output
    official, written = json.loads(done.stdout)["results"]
    assert written["scorer"] == "as-written/1" and official["scorer"] == "squad-v1.1/1"
    assert written["em"]["value"] <= official["em"]["value"]  # normalising only forgives
    rows = {r["testset"]: r for r in Store(workspace).results()}
    assert rows["tiny-as-written"]["scorer_version"] == "as-written/1"
    assert rows["tiny-as-written"]["key"] != rows["tiny"]["key"]


def test_a_test_set_naming_no_registered_scorer_is_one_line(tmp_path, monkeypatch, small_dev,
                                                            workspace):
    sets, _ = tiny_registry(tmp_path, monkeypatch, {}, {"sliding-window": SLIDING_WINDOW})
    write_testset(sets, "odd", small_dev, scorer="no-such-scorer")
    checked = CliRunner().invoke(main, ["validate", str(sets / "odd")])
    assert checked.exit_code == 1
    assert "scorer 'no-such-scorer' is not registered (choices: " in checked.output
    done = CliRunner().invoke(evaluate_cmd, ["-b", "sliding-window", "-t", "odd",
                                             "--runner", "local"])
    assert done.exit_code == 1 and "unknown scorer 'no-such-scorer'" in done.output
