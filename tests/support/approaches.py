"""A small registry for trained systems: a training split (one SQuAD dev article), a test set
(the next one) whose gold file lies on the host, and an approach folder written from a given
program; `words` is the honest one (a system answers each question with one word of its
passage, the word its `word` setting names; beside that number it keeps its training split's
words, a file large enough to be stored packed when frozen, which it must find to answer)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluator.bundles import spec as bundles
from evaluator.data import testsets
from evaluator.training.job import TrainJob
from tests.conftest import write_testset

WORDS = r'''
import json, os, sys
mode = sys.argv[1]
if mode == "train":
    train, config, model, checkpoints = sys.argv[2:6]
    hp = json.load(open(config))["hyperparameters"]
    open(os.path.join(model, "weights.txt"), "w").write(str(hp["word"]))  # same for any seed
    words = sorted({w for a in json.load(open(train))["data"] for p in a["paragraphs"]
                    for w in p["context"].split()})
    open(os.path.join(model, "vocabulary.txt"), "w").write("\n".join(words * 24))
else:
    model, source, output = sys.argv[2:5]
    word = int(open(os.path.join(model, "weights.txt")).read())
    assert open(os.path.join(model, "vocabulary.txt")).read().count("\n") > 1000
    doc = json.load(open(source))
    json.dump({q["id"]: (p["context"].split() + [""] * 9)[word]
               for a in doc["data"] for p in a["paragraphs"] for q in p["qas"]},
              open(output, "w"))
'''


def approach_registry(tmp_path: Path, dev_raw: dict, monkeypatch: pytest.MonkeyPatch,
                      workspace: Path, name: str, program: str) -> dict:
    """The registry, with the approach `name` running `program` (`train TRAIN CONFIG MODEL
    CHECKPOINTS` / `predict MODEL INPUT OUTPUT`; defaults: word 0, and `target` the gold
    file's path on the host)."""
    sets, subs = tmp_path / "sets", tmp_path / "subs"
    split = write_testset(sets, "tiny-train", {"version": "1.1", "data": dev_raw["data"][:1]})
    (split / "testset.yaml").write_text((split / "testset.yaml").read_text().replace(
        "kind: derived", "kind: training"))
    gold = write_testset(sets, "tiny-test", {"version": "1.1", "data": dev_raw["data"][1:2]})
    folder = subs / name
    folder.mkdir(parents=True)
    (folder / "approach.py").write_text(program)
    (folder / "bundle.yaml").write_text(
        f"id: {name}\nname: {name}\nkind: approach\n"
        "train: python3 approach.py train {train} {config} {model} {checkpoints}\n"
        "command: python3 approach.py predict {model} {input} {output}\n"
        "hyperparameters:\n"
        f"  defaults: {{attack: none, word: 0, target: {gold / 'data.json'}}}\n"
        "resources: {timeout: 120, output: 2m}\n")
    monkeypatch.setenv("QASHIFT_SUBMISSIONS", str(subs))
    monkeypatch.setenv("QASHIFT_TESTSETS", str(sets))
    return {"gold": gold / "data.json", "workspace": workspace, "subs": subs}


@pytest.fixture
def words(tmp_path, dev_raw, monkeypatch, workspace):
    """The registry with the honest approach `words`."""
    return approach_registry(tmp_path, dev_raw, monkeypatch, workspace, "words", WORDS)


def train_job(approach: str, seed: int = 0, **overrides) -> TrainJob:
    return TrainJob(bundles.get(approach), testsets.get("tiny-train"), seed, None, overrides)
