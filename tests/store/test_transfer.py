"""`qashift store import`: systems and results made in another store come in verified, and
are then neither trained nor scored again."""

from __future__ import annotations

import os
from pathlib import Path

from click.testing import CliRunner

from evaluator.bundles import spec as bundles
from evaluator.cli.main import main
from evaluator.data import testsets
from evaluator.runners.dispatch import Dispatcher
from evaluator.store import check as store_check
from evaluator.store.store import Store
from evaluator.training.job import TrainJob
from evaluator.training.run import train
from tests.support.training import f1_of

SYSTEM = "logreg-rajpurkar@tiny-train/s0"


def made_elsewhere(registry: dict, monkeypatch) -> tuple[Path, dict]:
    """A system trained and scored in the registry's store, which then stands for another
    machine's: this process switches to a fresh, empty workspace."""
    store = Store(registry["workspace"])
    train(TrainJob(bundles.get("logreg-rajpurkar"), testsets.get("tiny-train")),
          Dispatcher("local"), store)
    scored = f1_of(SYSTEM, "tiny-test")
    here = registry["workspace"].parent / "here"
    monkeypatch.setenv("QASHIFT_WORKSPACE", str(here))
    return registry["workspace"], scored


def import_(source: Path):
    return CliRunner().invoke(main, ["store", "import", str(source)])


def test_an_imported_system_is_neither_trained_nor_scored_again(registry, monkeypatch):
    elsewhere, scored = made_elsewhere(registry, monkeypatch)
    done = import_(elsewhere)
    assert done.exit_code == 0, done.output
    assert "imported 1 trained systems and 1 results (0 already here)" in done.output
    here = Store.open_default()
    [system] = here.systems()
    assert system == Store(elsewhere).systems()[0]
    assert here.model_path(system["weights_digest"]).is_dir()
    trained = train(TrainJob(bundles.get("logreg-rajpurkar"), testsets.get("tiny-train")),
                    Dispatcher("local"), here)
    assert trained.cached
    again = f1_of(SYSTEM, "tiny-test")
    assert again["f1"] == scored["f1"] and again["cached"]
    assert len(here.results()) == 1
    assert store_check.check(here).ok
    twice = import_(elsewhere)
    assert "imported 0 trained systems and 0 results (2 already here)" in twice.output
    assert len(here.results()) == 1 and len(here.systems()) == 1


def test_a_result_whose_objects_are_corrupt_is_left_out(registry, monkeypatch):
    elsewhere, _ = made_elsewhere(registry, monkeypatch)
    [result] = Store(elsewhere).results()
    predictions = Store(elsewhere).object_path(result["predictions_sha256"])
    predictions.write_bytes(predictions.read_bytes() + b" ")
    done = import_(elsewhere)
    assert done.exit_code == 1
    assert "imported 1 trained systems and 0 results" in done.output
    assert "left out 1 rows" in done.output
    assert "predictions_sha256" in done.output and "does not match its hash" in done.output
    here = Store.open_default()
    assert len(here.systems()) == 1 and here.results() == []
    assert store_check.check(here).ok


def test_a_system_whose_weights_are_corrupt_is_left_out_with_its_results(
        registry, monkeypatch):
    elsewhere, _ = made_elsewhere(registry, monkeypatch)
    [system] = Store(elsewhere).systems()
    for path in Store(elsewhere).model_path(system["weights_digest"]).rglob("*"):
        if path.is_file():
            os.chmod(path, 0o644)
            path.write_bytes(path.read_bytes() + b" ")
    done = import_(elsewhere)
    assert done.exit_code == 1
    assert "imported 0 trained systems and 0 results" in done.output
    assert "left out 2 rows" in done.output
    assert "do not match their digest" in done.output
    assert "its system was left out" in done.output
    here = Store.open_default()
    assert here.systems() == [] and here.results() == []
    models = here.workspace / "models"
    assert not models.exists() or not any(models.iterdir())


def test_a_system_in_training_here_is_left_out_until_its_training_ends(
        registry, monkeypatch):
    """A controller here holds the system's train lease: the imported row would be replaced
    by that training's when it finishes, so neither it nor its results come in yet."""
    elsewhere, _ = made_elsewhere(registry, monkeypatch)
    [system] = Store(elsewhere).systems()
    here = Store.open_default()
    assert here.acquire(system["key"], system["approach"], system["split"])
    done = import_(elsewhere)
    assert done.exit_code == 0, done.output
    assert "imported 0 trained systems and 0 results" in done.output
    assert "left out 1 systems being trained here right now" in done.output
    assert here.systems() == [] and here.results() == []
    here.release(system["key"])
    again = import_(elsewhere)
    assert "imported 1 trained systems and 1 results (0 already here)" in again.output


def test_a_folder_that_is_no_store_is_one_line(registry, tmp_path):
    done = import_(tmp_path)
    assert done.exit_code != 0
    assert "is not a results store" in done.output
    assert "Traceback" not in done.output
