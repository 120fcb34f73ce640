"""Shared setup for study tests: a private copy of the logistic-regression approach and two
small test-set folders cut from SQuAD dev, a training split and a test set."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.conftest import REPO, write_testset


def tiny_folders(tmp_path: Path, dev_raw: dict, monkeypatch, *, train_paragraphs: int,
                 test_paragraphs: int, test_trains_on_split: bool = False) -> Path:
    """`tiny-train` (kind training) and `tiny-test` (optionally naming tiny-train as its
    training split) under tmp_path/sets, logreg-rajpurkar under tmp_path/subs, both put on
    the service's paths; returns the sets folder."""
    subs, sets = tmp_path / "subs", tmp_path / "sets"
    shutil.copytree(REPO / "submissions" / "logreg-rajpurkar", subs / "logreg-rajpurkar")
    first, second = dev_raw["data"][0], dev_raw["data"][1]
    folder = write_testset(sets, "tiny-train", {"version": "1.1", "data": [
        dict(first, paragraphs=first["paragraphs"][:train_paragraphs])]})
    (folder / "testset.yaml").write_text((folder / "testset.yaml").read_text().replace(
        "kind: derived", "kind: training"))
    folder = write_testset(sets, "tiny-test", {"version": "1.1", "data": [
        dict(second, paragraphs=second["paragraphs"][:test_paragraphs])]})
    if test_trains_on_split:
        (folder / "testset.yaml").write_text((folder / "testset.yaml").read_text()
                                             + "train: tiny-train\n")
    monkeypatch.setenv("QASHIFT_SUBMISSIONS", str(subs))
    monkeypatch.setenv("QASHIFT_TESTSETS", str(sets))
    return sets
