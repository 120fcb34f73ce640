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
    approach_folder(subs, name, name, program,
                    f"{{attack: none, word: 0, target: {gold / 'data.json'}}}", "2m")
    monkeypatch.setenv("QASHIFT_SUBMISSIONS", str(subs))
    monkeypatch.setenv("QASHIFT_TESTSETS", str(sets))
    return {"gold": gold / "data.json", "workspace": workspace, "subs": subs}


@pytest.fixture
def words(tmp_path, dev_raw, monkeypatch, workspace):
    """The registry with the honest approach `words`."""
    return approach_registry(tmp_path, dev_raw, monkeypatch, workspace, "words", WORDS)


def train_job(approach: str, seed: int = 0, **overrides) -> TrainJob:
    return TrainJob(bundles.get(approach), testsets.get("tiny-train"), seed, None, overrides)


# A study's tests need real trainings, many of them, not a good reader: `word-position`
# learns, in a fraction of a second, which word of a passage (among as many candidate
# positions as its seed and `epochs` give) most often begins an answer in its split, and
# answers every question with the word there; its weights also hold its seed and `l2`, so
# every system of a plan has weights of its own, and the same system trains to the same ones.
WORD_POSITION = r'''
import json, os, random, sys
mode = sys.argv[1]
if mode == "train":
    train, config, model = sys.argv[2:5]
    config = json.load(open(config))
    hp, seed = config["hyperparameters"], config["seed"]
    candidates = list(range(12))
    random.Random(seed).shuffle(candidates)
    candidates = candidates[:3 * int(hp["epochs"])]
    hits = dict.fromkeys(candidates, 0)
    for article in json.load(open(train))["data"]:
        for p in article["paragraphs"]:
            words = p["context"].split()
            for q in p["qas"]:
                starts = {a["text"].split()[0] for a in q["answers"] if a["text"].split()}
                for k in candidates:
                    hits[k] += k < len(words) and words[k] in starts
    best = max(candidates, key=lambda k: hits[k])
    for epoch, k in enumerate(candidates[:int(hp["epochs"])]):
        print(f"epoch {epoch + 1} loss {1 / (1 + hits[k]):.4f}", flush=True)
    json.dump({"word": best, "seed": seed, "l2": hp["l2"]},
              open(os.path.join(model, "weights.json"), "w"))
else:
    model, source, output = sys.argv[2:5]
    word = json.load(open(os.path.join(model, "weights.json")))["word"]
    doc = json.load(open(source))
    json.dump({q["id"]: (p["context"].split() + [""] * 12)[word]
               for a in doc["data"] for p in a["paragraphs"] for q in p["qas"]},
              open(output, "w"))
'''


def word_position_folder(subs: Path) -> Path:
    """The `word-position` approach folder under `subs`."""
    return approach_folder(subs, "word-position", "The word at a learned position",
                           WORD_POSITION, "{epochs: 4, l2: 0.0001}", "1m")


def approach_folder(subs: Path, approach_id: str, name: str, program: str, defaults: str,
                    output: str) -> Path:
    """An approach folder under `subs` running `program` (`train TRAIN CONFIG MODEL
    CHECKPOINTS` / `predict MODEL INPUT OUTPUT`) with these default hyperparameters (a YAML
    mapping) and output cap."""
    folder = subs / approach_id
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "approach.py").write_text(program)
    (folder / "bundle.yaml").write_text(
        f"id: {approach_id}\nname: {name}\nkind: approach\n"
        "train: python3 approach.py train {train} {config} {model} {checkpoints}\n"
        "command: python3 approach.py predict {model} {input} {output}\n"
        f"hyperparameters:\n  defaults: {defaults}\n"
        f"resources: {{timeout: 120, output: {output}}}\n")
    return folder
