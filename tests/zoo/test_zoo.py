"""The model zoo recipe: the by-article split, the held-out test set, training labels, and a
tiny recipe trained end to end into an hf-qa bundle (a tiny random BERT stands in for the
MiniLM encoder, so the test takes seconds)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaluator.zoo import models as zoo
from tests.tiny_bert import make_tiny_bert, squad_texts

pytest.importorskip("torch")


def count(raw: dict) -> int:
    return sum(len(p["qas"]) for a in raw["data"] for p in a["paragraphs"])


def test_split_is_by_article_disjoint_complete_and_deterministic(dev_raw):
    train, heldout = zoo.heldout_split(dev_raw)
    titles = lambda raw: [a["title"] for a in raw["data"]]  # noqa: E731
    assert len(train["data"]) == len(heldout["data"]) == 24
    assert not set(titles(train)) & set(titles(heldout))
    assert count(train) + count(heldout) == count(dev_raw) == 10570
    assert zoo.heldout_split(json.loads(json.dumps(dev_raw))) == (train, heldout)
    order = titles(dev_raw)
    assert titles(heldout) == sorted(titles(heldout), key=order.index)  # file order kept


def test_the_heldout_test_set_is_the_heldout_half(workspace, shared_data, dev_raw):
    from evaluator.data import testsets

    heldout = testsets.get("squad-dev-heldout")
    # derived from squad-dev, but the zoo's original distribution, not an ablation
    assert heldout.reference == "squad-dev" and heldout.kind == "original"
    data = heldout.load([shared_data])
    assert data.raw["data"] == zoo.heldout_split(dev_raw)[1]["data"]
    assert len(data.questions) == heldout.questions == 5453
    # the adversarial sets split on the same articles
    held_titles = {a["title"] for a in data.raw["data"]}
    for name in ("addsent-heldout", "addonesent-heldout"):
        subset = testsets.get(name)
        assert subset.kind == "adversarial" and subset.derive.parent == name.split("-")[0]
        assert subset.reference == "squad-dev-heldout"  # the x axis of the population's trend
        assert {a["title"] for a in subset.load([shared_data]).raw["data"]} == held_titles


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory, dev_raw) -> Path:
    return make_tiny_bert(tmp_path_factory.mktemp("encoder"),
                          squad_texts({"data": dev_raw["data"][:4]}))


def test_training_labels_point_at_the_gold_answer(tiny_encoder, dev_raw):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_encoder)
    examples = zoo.training_examples({"data": dev_raw["data"][:1]}, 40, seed=3)
    windows = zoo.training_features(tokenizer, examples, max_seq_len=96, doc_stride=32)
    assert len(windows["input_ids"]) >= 40  # every question keeps at least one window
    whole = zoo.training_features(tokenizer, examples, max_seq_len=512, doc_stride=128)
    assert len(whole["input_ids"]) == len(examples)  # one window each: rows align
    for example, s, e in zip(examples, whole["start_positions"], whole["end_positions"]):
        offsets = tokenizer(example["question"], example["context"],
                            return_offsets_mapping=True)["offset_mapping"]
        assert 0 < s <= e
        labelled = example["context"][offsets[s][0]:offsets[e][1]]
        assert example["text"] in labelled and len(labelled) < len(example["text"]) + 20


def test_a_tiny_recipe_trains_into_a_runnable_bundle_reproducibly(
        workspace, tmp_path, tiny_encoder, dev_raw):
    from evaluator.bundles import spec as bundles
    from evaluator.runners.base import RunRequest
    from evaluator.runners.hfqa import HFQARunner

    recipe = zoo.Recipe("tiny", layers=1, questions=48, epochs=1, max_seq_len=96,
                        doc_stride=32, batch_size=8)
    raw = {"version": "1.1", "data": dev_raw["data"][:6]}
    folder = zoo.build(recipe, raw, root=tmp_path / "subs", encoder=tiny_encoder, log=print)
    bundle = bundles.from_folder(folder)
    assert bundle.kind == "hf-qa" and bundle.model["cache"] == "zoo/tiny"
    meta = bundle.metadata
    assert meta["layers"] == 1 and meta["train_questions"] == 48
    assert meta["training_seconds"] > 0 and meta["trained_on"] == "squad-dev-train-half"
    first = bundle.model["sha256"]
    assert first == zoo.weights_sha256(zoo.model_dir("tiny"))

    again = zoo.build(recipe, raw, root=tmp_path / "subs", encoder=tiny_encoder, force=True,
                      log=print)
    assert bundles.from_folder(again).model["sha256"] == first  # fixed seed, same weights

    heldout = zoo.heldout_split(raw)[1]
    (tmp_path / "in.json").write_text(json.dumps(heldout))
    (tmp_path / "out").mkdir()
    record = HFQARunner(subprocess=False, progress=False).run(
        RunRequest(bundle, tmp_path / "in.json", tmp_path / "out", "squad-dev-heldout"))
    assert record.details["questions"] == count(heldout)


def test_zoo_commands_list_the_recipes(workspace):
    from click.testing import CliRunner

    from evaluator.cli.zoo import zoo_group

    result = CliRunner().invoke(zoo_group, ["list", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [r["name"] for r in rows] == [r.name for r in zoo.RECIPES]
    assert len(rows) >= 8 and {r["layers"] for r in rows} >= {1, 2, 3, 4, 6}
    bad = CliRunner().invoke(zoo_group, ["build", "no-such-model"])
    assert bad.exit_code != 0


def test_a_rebuild_to_other_weights_says_it_rewrote_the_pinned_bundle(tmp_path, caplog,
                                                                      monkeypatch):
    import logging

    logger = logging.getLogger("qashift")
    logger.addHandler(caplog.handler)
    monkeypatch.setattr(logger, "level", logging.INFO)
    recipe = zoo.Recipe("tiny")
    meta = {"train_questions": 1, "train_features": 1, "training_seconds": 1.0,
            "device": "cpu", "torch": "x", "transformers": "y", "encoder": "z"}
    zoo.write_bundle(recipe, meta, "a" * 64, tmp_path)
    assert not caplog.records
    zoo.write_bundle(recipe, meta, "a" * 64, tmp_path)  # the same weights: no word needed
    assert not caplog.records
    zoo.write_bundle(recipe, meta, "b" * 64, tmp_path)
    [record] = caplog.records
    assert "are not the ones it pinned (aaaaaaaaaaaa" in record.getMessage()
    assert "b" * 64 in (tmp_path / "zoo-tiny" / "bundle.yaml").read_text()
    logger.removeHandler(caplog.handler)
