"""The result of a cell is one answer: after a full run, a `check` and a `--limit` run of
the same cell, every view of the store (status, results list/show/export/samples, the
challenge report's lookup, the Python API, the analysis sources) gives the full run's
numbers; the samples appear only when asked for, labelled with their n."""

from __future__ import annotations

import csv
import json

import pytest
from click.testing import CliRunner

from analysis.studies.challenge import _latest
from evaluator import api
from evaluator.api.results import Results
from evaluator.cli.main import evaluate_cmd, main
from evaluator.data import testsets
from evaluator.store.store import Store
from tests.conftest import FIRST_WORD, tiny_registry


@pytest.fixture
def cell(tmp_path, small_dev, monkeypatch, workspace):
    """honest x toy scored in full, then by `check` on 5 questions and `--limit 7`."""
    tiny_registry(tmp_path, monkeypatch, {"toy": small_dev}, {"honest": FIRST_WORD})
    runner = CliRunner()
    full = runner.invoke(evaluate_cmd, ["-b", "honest", "-t", "toy", "--runner", "local",
                                        "--json"])
    assert full.exit_code == 0, full.output
    result = json.loads(full.stdout)["results"][0]
    assert runner.invoke(main, ["check", "-b", "honest", "-t", "toy", "-n", "5", "--runner",
                                "local"]).exit_code == 0
    assert runner.invoke(evaluate_cmd, ["-b", "honest", "-t", "toy", "--runner", "local",
                                        "--limit", "7"]).exit_code == 0
    assert len(Store.open_default().results()) == 3
    return {"n": result["n"], "em": result["em"]["value"], "f1": result["f1"]["value"],
            "out": tmp_path / "out"}


def cli(*args: str) -> str:
    done = CliRunner().invoke(main, list(args))
    assert done.exit_code == 0, done.output
    return done.stdout


def test_every_view_gives_the_full_run(cell):
    store = Store.open_default()
    status = cli("status", "-b", "honest", "-t", "toy")
    assert f"{cell['f1']:.1f}" in status
    shown = cli("results", "show", "honest", "toy")
    assert f"n: {cell['n']}" in shown and f"f1: {cell['f1']}" in shown
    cli("results", "export", "honest", "toy", "--out", str(cell["out"]))
    with open(cell["out"] / "honest.toy.scores.csv") as handle:
        assert len(list(csv.DictReader(handle))) == cell["n"]
    cli("results", "samples", "-b", "honest", "--out", str(cell["out"] / "s"))
    lines = (cell["out"] / "s" / "honest.toy.jsonl").read_text().splitlines()
    assert len(lines) == cell["n"]
    [row] = Results(store).rows()
    assert (row["n"], row["f1"]) == (cell["n"], cell["f1"])
    assert _latest(store, "honest", testsets.get("toy"))["n"] == cell["n"]
    frame = api.results("honest", "toy")
    assert list(frame["n"]) == [cell["n"]] and list(frame["f1"]) == [cell["f1"]]


def test_samples_are_listed_only_when_asked_and_labelled(cell):
    plain = cli("results", "list")
    assert plain.count("honest") == 1 and "full" in plain and "sample" not in plain
    listed = cli("results", "list", "--include-samples")
    assert "sample of 5" in listed and "sample of 7" in listed


def test_a_cell_with_only_a_sample_says_so(tmp_path, small_dev, monkeypatch, workspace):
    tiny_registry(tmp_path, monkeypatch, {"toy": small_dev}, {"honest": FIRST_WORD})
    assert CliRunner().invoke(main, ["check", "-b", "honest", "-t", "toy", "-n", "5",
                                     "--runner", "local"]).exit_code == 0
    done = CliRunner().invoke(main, ["results", "show", "honest", "toy"])
    assert done.exit_code != 0
    assert "only a sample of 5 questions of honest x toy is stored" in done.output
    assert "done 1" not in cli("status", "-b", "honest", "-t", "toy")


def test_a_result_of_a_deleted_test_set_folder_is_marked(cell, tmp_path):
    import shutil

    shutil.rmtree(tmp_path / "sets" / "toy")
    assert "its test-set folder is gone" in cli("results", "list")
