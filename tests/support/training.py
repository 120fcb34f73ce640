"""A small training registry: logistic regression and the sliding-window baseline, a
training split of the first paragraphs of two SQuAD dev articles and a test split of the
third article."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
from click.testing import CliRunner

from evaluator.cli.main import evaluate_cmd
from tests.conftest import REPO, few_of, write_testset

LOGREG = REPO / "submissions" / "logreg-rajpurkar"
FAST = ["--set", "epochs=2"]
TRAIN_PARAGRAPHS = 12  # of each of the two articles of the training split


@pytest.fixture
def registry(tmp_path, dev_raw, monkeypatch, workspace):
    """A training split (the first 12 paragraphs of 2 dev articles, 309 questions: what the
    tests train proves nothing more on a larger one) and a test split (the third article),
    with the approach."""
    subs, sets = tmp_path / "subs", tmp_path / "sets"
    shutil.copytree(LOGREG, subs / "logreg-rajpurkar")
    shutil.copytree(REPO / "submissions" / "sliding-window", subs / "sliding-window")
    train_folder = write_testset(sets, "tiny-train", few_of(dev_raw, TRAIN_PARAGRAPHS))
    text = (train_folder / "testset.yaml").read_text().replace("kind: derived",
                                                               "kind: training")
    (train_folder / "testset.yaml").write_text(text)
    test_folder = write_testset(sets, "tiny-test", {"version": "1.1",
                                                    "data": dev_raw["data"][2:3]})
    (test_folder / "testset.yaml").write_text((test_folder / "testset.yaml").read_text() +
                                              "train: tiny-train\n")
    monkeypatch.setenv("QASHIFT_SUBMISSIONS", str(subs))
    monkeypatch.setenv("QASHIFT_TESTSETS", str(sets))
    return {"subs": subs, "sets": sets, "workspace": workspace}


def qashift(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["qashift", *args], capture_output=True, text=True,
                          env=os.environ.copy(), timeout=600)


def f1_of(bundle_id: str, testset: str, runner: str = "local", *extra: str) -> dict:
    result = CliRunner().invoke(evaluate_cmd, ["-b", bundle_id, "-t", testset, "--runner",
                                               runner, "--json", *extra])
    assert result.exit_code == 0, result.output
    [cell] = json.loads(result.stdout)["results"]
    return cell
