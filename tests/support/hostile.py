"""An approach that attacks the controller through what it hands back after training
(`attack` says how), and the small registry it trains in: a training split, and a test set
whose gold file lies on the host where a link could reach it."""

from __future__ import annotations

import pytest

from evaluator.bundles import spec as bundles
from evaluator.data import testsets
from evaluator.training.job import TrainJob
from tests.conftest import write_testset

# The attacker: its train command does what `attack` says, and its predict command answers
# from a gold file in its weights when one got through (which would score EM 100).
ATTACKER = r'''
import json, os, sys
mode = sys.argv[1]
if mode == "train":
    train, config, model, checkpoints = sys.argv[2:6]
    hp = json.load(open(config))["hyperparameters"]
    attack, target = hp["attack"], hp["target"]
    if attack == "link-gold":
        os.symlink(target, os.path.join(model, "gold.json"))
    elif attack == "link-environ":
        os.symlink("/proc/self/environ", os.path.join(model, "environ"))
    elif attack == "link-folder":
        os.symlink(os.path.dirname(target), os.path.join(model, "data"))
    elif attack == "hard-link":
        open(os.path.join(model, "w.bin"), "w").write("w")
        os.link(os.path.join(model, "w.bin"), os.path.join(model, "w2.bin"))
    elif attack == "fifo-weights":
        os.mkfifo(os.path.join(model, "w.bin"))
    elif attack == "fifo-progress":
        os.mkfifo(os.path.join(checkpoints, "progress.json"))
    elif attack == "deep-progress":
        open(os.path.join(checkpoints, "progress.json"), "w").write("[" * 200000 + "]" * 200000)
    elif attack == "typed-progress":
        json.dump({"epoch": "one", "epochs": [2], "loss": {"x": 1}, "eta_s": None},
                  open(os.path.join(checkpoints, "progress.json"), "w"))
    elif attack == "mountinfo":  # what the container can learn of the host's folders
        open(os.path.join(model, "mounts.txt"), "w").write(open("/proc/self/mountinfo").read()
                                                           + json.dumps(dict(os.environ)))
    elif attack == "fat-checkpoints":
        with open(os.path.join(checkpoints, "state.bin"), "wb") as handle:
            handle.write(os.urandom(3 << 20))
    open(os.path.join(model, "weights.txt"), "w").write(str(hp["word"]))  # same for any seed
else:
    model, source, output = sys.argv[2:5]
    doc = json.load(open(source))
    word = int(open(os.path.join(model, "weights.txt")).read())
    gold = {}
    if os.path.exists(os.path.join(model, "gold.json")):
        for a in json.load(open(os.path.join(model, "gold.json")))["data"]:
            for p in a["paragraphs"]:
                for q in p["qas"]:
                    gold[q["id"]] = q["answers"][0]["text"]
    json.dump({q["id"]: gold.get(q["id"], (p["context"].split() + [""] * 9)[word])
               for a in doc["data"] for p in a["paragraphs"] for q in p["qas"]},
              open(output, "w"))
'''


@pytest.fixture
def hostile(tmp_path, dev_raw, monkeypatch, workspace):
    """A training split, a test set whose gold file lies on the host, and the attacker."""
    sets, subs = tmp_path / "sets", tmp_path / "subs"
    split = write_testset(sets, "tiny-train", {"version": "1.1", "data": dev_raw["data"][:1]})
    (split / "testset.yaml").write_text((split / "testset.yaml").read_text().replace(
        "kind: derived", "kind: training"))
    gold = write_testset(sets, "tiny-test", {"version": "1.1", "data": dev_raw["data"][1:2]})
    folder = subs / "attacker"
    folder.mkdir(parents=True)
    (folder / "attack.py").write_text(ATTACKER)
    (folder / "bundle.yaml").write_text(
        "id: attacker\nname: attacker\nkind: approach\n"
        "train: python3 attack.py train {train} {config} {model} {checkpoints}\n"
        "command: python3 attack.py predict {model} {input} {output}\n"
        "hyperparameters:\n"
        f"  defaults: {{attack: none, word: 0, target: {gold / 'data.json'}}}\n"
        "resources: {timeout: 120, output: 2m}\n")
    monkeypatch.setenv("QASHIFT_SUBMISSIONS", str(subs))
    monkeypatch.setenv("QASHIFT_TESTSETS", str(sets))
    return {"gold": gold / "data.json", "workspace": workspace, "subs": subs}


def job(attack: str, seed: int = 0) -> TrainJob:
    overrides = {} if attack == "none" else {"attack": attack}
    return TrainJob(bundles.get("attacker"), testsets.get("tiny-train"), seed, None, overrides)
