"""A hostile approach, attacked through what it hands back after training: links in its
weights to gold answers or to the controller's environment, FIFOs, deep or ill-typed
progress files, checkpoints past the cap. Every attack ends in a recorded failure of that
system's cell, with one line naming what was refused; the controller neither hangs nor
crashes, and the other systems of a study train on. Two systems with byte-identical weights
stay two systems."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from evaluator.core.errors import RunFailure
from evaluator.runners.dispatch import Dispatcher
from evaluator.store.store import Store
from evaluator.training.run import train
from tests.docker_kit import needs_docker
from tests.support.approaches import approach_registry, train_job

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
    elif attack == "link-checkpoints-and-fail":  # a failure that keeps the stage to resume
        os.symlink(target, os.path.join(checkpoints, "state.bin"))
        os.symlink(os.path.dirname(target), os.path.join(checkpoints, "shards"))
        sys.exit(1)
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
    """The registry with the attacker (its gold file on the host, where a link could reach);
    a temporary folder of this test's own, where the runners stage trainings, so that what
    another test stages at the same time is not counted as left behind."""
    own_tmp = tmp_path / "tmp"
    own_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(own_tmp))
    return approach_registry(tmp_path, dev_raw, monkeypatch, workspace, "attacker", ATTACKER)


def job(attack: str, seed: int = 0):
    return train_job("attacker", seed, **({} if attack == "none" else {"attack": attack}))


def refused_training(attack: str, runner: str, pattern: str) -> None:
    store = Store.open_default()
    stages = set(Path(tempfile.gettempdir()).glob("qashift-train-*"))
    with pytest.raises(RunFailure, match=pattern) as caught:
        train(job(attack), Dispatcher(runner), store)
    assert caught.value.failure_class == "refused-files" and "\n" not in str(caught.value)
    assert store.systems() == []
    [failure] = store.failures()
    assert failure["failure_class"] == "refused-files"
    assert not list((store.workspace / "models").glob("[0-9a-f]*"))  # nothing stored
    assert set(Path(tempfile.gettempdir()).glob("qashift-train-*")) == stages  # nor staged


ATTACKS = [
    ("link-gold", r"gold.json is a link \(to .*tiny-test/data.json\)"),
    ("link-environ", r"environ is a link \(to /proc/self/environ\)"),
    ("link-folder", r"data is a link \(to .*tiny-test\)"),
    ("hard-link", r"is a hard link"),
    ("fifo-weights", r"w.bin is a FIFO"),
    ("fifo-progress", r"its checkpoints: progress.json is a FIFO"),
    ("fat-checkpoints", r"its checkpoints: state.bin brings the folder over its 2,097,152 bytes"),
]


@pytest.mark.parametrize("attack, pattern", ATTACKS)
def test_what_a_local_training_hands_back_passes_the_gate_or_is_a_recorded_failure(
        hostile, attack, pattern):
    refused_training(attack, "local", pattern)


@pytest.mark.usefixtures("no_container_left_behind")
@needs_docker[0]
@pytest.mark.parametrize("attack, pattern", [a for a in ATTACKS if a[0] != "fat-checkpoints"])
def test_what_a_container_training_hands_back_passes_the_gate_or_is_a_recorded_failure(
        hostile, client, attack, pattern):
    refused_training(attack, "docker", pattern)


@pytest.mark.usefixtures("no_container_left_behind")
@needs_docker[0]
def test_a_training_container_sees_no_host_folder_of_the_controller(hostile, client):
    from tests.conftest import REPO

    store = Store.open_default()
    stages = set(Path(tempfile.gettempdir()).glob("qashift-train-*"))
    trained = train(job("mountinfo"), Dispatcher("docker"), store)
    seen = (Path(trained.bundle.model["path"]) / "mounts.txt").read_text()
    assert "/input/input.json" in seen and "/checkpoints" in seen  # it did read its mounts
    for host in (str(store.workspace), str(REPO), str(hostile["subs"]), str(hostile["gold"])):
        assert host not in seen, host
    assert set(Path(tempfile.gettempdir()).glob("qashift-train-*")) == stages  # removed


@pytest.mark.usefixtures("no_container_left_behind")
@needs_docker[0]
def test_a_container_writing_past_the_cap_into_its_checkpoints_is_stopped(hostile, client):
    store = Store.open_default()
    with pytest.raises(RunFailure) as caught:
        train(job("fat-checkpoints"), Dispatcher("docker"), store)
    assert caught.value.failure_class in ("output-too-large", "refused-files")
    assert store.systems() == []


@pytest.mark.usefixtures("no_container_left_behind")
@needs_docker[0]
def test_links_a_failed_container_left_in_its_checkpoints_change_no_mode_on_the_next_attempt(
        hostile, client, tmp_path):
    """The stage outlives a resumable failure; before the next attempt makes its checkpoints
    writable for the container, they pass the gate, so no chmod follows a link out."""
    victim = tmp_path / "private"
    victim.mkdir(mode=0o700)
    secret = victim / "secret.txt"
    secret.write_text("the operator's")
    secret.chmod(0o600)
    store = Store.open_default()
    attack = train_job("attacker", 0, attack="link-checkpoints-and-fail", target=str(secret))
    with pytest.raises(RunFailure) as first:
        train(attack, Dispatcher("docker"), store)
    assert first.value.failure_class == "nonzero-exit"
    with pytest.raises(RunFailure, match=r"the checkpoints its last attempt left: (state.bin|"
                       r"shards) is a link") as second:
        train(attack, Dispatcher("docker"), store)
    assert second.value.failure_class == "refused-files"
    assert (secret.stat().st_mode & 0o777, victim.stat().st_mode & 0o777) == (0o600, 0o700)
    assert not list(Path(tempfile.gettempdir()).glob("qashift-train-*"))  # a fresh start next


@pytest.mark.parametrize("attack", ["deep-progress", "typed-progress"])
def test_bad_progress_files_are_ignored_without_a_traceback(hostile, attack):
    seen: list[dict] = []
    trained = train(job(attack), Dispatcher("local"), Store.open_default(), progress=seen.append)
    assert not trained.cached
    assert all(set(doc) <= {"epoch", "epochs", "step", "steps", "loss", "eta_s"} and
               all(isinstance(v, int | float) for v in doc.values()) for doc in seen)


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, env=os.environ.copy(),
                          timeout=600)


def test_a_study_goes_on_past_a_hostile_system_and_keeps_identical_weights_apart(
        hostile, tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text("id: hostile\nname: hostile\nsplit: tiny-train\ntestsets: [tiny-test]\n"
                    "approaches:\n  attacker:\n"
                    "    - {settings: [{attack: fifo-weights}]}\n"
                    "    - {settings: [{}], seeds: [0, 1]}\n")
    done = run("qashift", "study", "run", str(plan), "--runner", "local")
    assert "w.bin is a FIFO" in done.stderr
    store = Store.open_default()
    systems = {row["system"]: row for row in store.systems()}
    assert set(systems) == {"attacker@tiny-train/s0", "attacker@tiny-train/s1"}
    assert len({row["weights_digest"] for row in systems.values()}) == 1  # byte-identical
    [failure] = store.failures()
    assert failure["failure_class"] == "refused-files"
    results = store.results()
    assert {r["bundle"] for r in results} == set(systems)  # two cells, not one
    assert len({r["bundle_digest"] for r in results}) == 2
    table = tmp_path / "plan.csv"
    done = run("qashift", "study", "table", str(plan), "--out", str(table))
    assert done.returncode == 0, done.stderr
    with open(table) as handle:
        rows = list(csv.DictReader(handle))
    assert {r["model"] for r in rows} == set(systems)
    assert len({r["bundle_digest"] for r in rows}) == 2


def test_no_gold_reaches_a_system_so_it_scores_like_the_first_word_baseline(hostile):
    """The honest run of the same program: without a gold file in its weights it answers
    with first words, so an EM of 100 could only have come through the gate."""
    trained = train(job("none"), Dispatcher("local"), Store.open_default())
    assert Path(trained.bundle.model["path"]).joinpath("weights.txt").read_text() == "0"
    done = run("evaluate", "-b", "attacker@tiny-train/s0", "-t", "tiny-test", "--runner",
               "local", "--json")
    assert done.returncode == 0, done.stderr
    [cell] = json.loads(done.stdout)["results"]
    assert cell["em"]["value"] < 20
