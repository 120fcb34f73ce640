"""The WordNet synthetic QA generator (Liu et al.'s F13 with WordNet for Wikidata): 50
triples per passage; every answer is its element's realisation at its offset; an inverse
rewrite swaps subject and object; a hypernym rewrite uses a hypernym of the entity it
replaces; the paper's split sizes can be asked for; aliases off realises labels only; the
test part's seeds and the training part's never meet."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from evaluator.core.errors import DataError
from evaluator.data import testsets
from evaluator.data.derive import kg

pytestmark = pytest.mark.skipif(not (kg.DEFAULT_ROOT / "data.noun").is_file(),
                                reason="WordNet 3.0 (Debian wordnet-base) is not installed; "
                                       "install.sh installs it")


@pytest.fixture(scope="module")
def graph() -> kg.Graph:
    return kg.load_graph()


@pytest.fixture(scope="module")
def made() -> tuple[dict, dict]:
    return kg.kg(None, {"part": "test", "passages": 8, "questions": 30, "seeds": 500},
                 random.Random(3))


def test_a_wordnet_data_line_becomes_an_entity_with_label_aliases_and_relations():
    lines = ["  1 This software and database is being provided ...\n",
             "02084071 05 n 03 dog 0 domestic_dog 0 Canis_familiaris 0 003 @ 02083346 n 0000 "
             "%p 02158846 n 0000 + 01234567 v 0101 | a member of the genus Canis\n",
             "00004980 00 s 0a galore(ip) 0 " + " ".join(f"w{k} 0" for k in range(9))
             + " 000 | in abundance\n"]
    names, edges = kg.parse(lines)
    assert names["02084071-n"] == ("dog", "domestic dog", "Canis familiaris")
    assert edges["02084071-n"] == [("@", "02083346-n"), ("%p", "02158846-n")]  # '+' not kept
    assert names["00004980-a"][0] == "galore"  # the marker dropped
    assert len(names["00004980-a"]) == 10 and edges["00004980-a"] == []  # hex word count


def test_every_passage_realises_fifty_triples(made):
    raw, stats = made
    paragraphs = raw["data"][0]["paragraphs"]
    assert len(paragraphs) == 8 and stats["triples_per_passage"] == 50
    for p in paragraphs:
        assert p["context"].endswith(" .")
        assert len(p["context"][:-2].split(" . ")) == 50


def test_every_answer_is_an_exact_span_that_the_question_masks(made):
    raw, stats = made
    qas = [(p["context"], q) for p in raw["data"][0]["paragraphs"] for q in p["qas"]]
    assert len(qas) == stats["questions"] == 30
    for context, q in qas:
        answer = q["answers"][0]
        assert context[answer["answer_start"]:].startswith(answer["text"])
        assert q["question"].count(kg.MASK) == 1


def test_an_inverse_rewrite_swaps_subject_and_object(graph):
    triple = next(t for e in kg.ranked_seeds(graph, 50, 50) for t in graph.triples(e)
                  if t.relation == "%p")
    for seed in range(20):
        query = kg.make_query(triple, graph, random.Random(seed), p_inverse=1.0,
                              p_hypernym=0.0)
        assert query.inverted and query.relation == "#p"
        assert (query.subject, query.object) == (triple.object, triple.subject)
        masked_entity = query.subject if query.masked == "subject" else query.object
        assert masked_entity in (triple.subject, triple.object)


def test_a_relation_without_inverse_is_never_inverted(graph):
    entity = next(e for e in graph.names if any(r == "*" for r, _ in graph.edges[e]))
    triple = next(t for t in graph.triples(entity) if t.relation == "*")
    query = kg.make_query(triple, graph, random.Random(0), p_inverse=1.0, p_hypernym=0.0)
    assert not query.inverted and query.relation == "*"


def test_a_hypernym_rewrite_uses_a_hypernym_of_the_entity_it_replaces(graph):
    seen = 0
    for entity in kg.ranked_seeds(graph, 40, 50):
        for triple in graph.triples(entity)[:5]:
            query = kg.make_query(triple, graph, random.Random(seen), p_inverse=0.0,
                                  p_hypernym=1.0)
            kept = triple.object if query.masked == "subject" else triple.subject
            shown = query.object if query.masked == "subject" else query.subject
            if graph.hypernyms(kept) and query.hypernym is not None:
                assert shown == query.hypernym
                assert query.hypernym in graph.hypernyms(kept)
                assert ("@", query.hypernym) in graph.edges[kept] or \
                    ("@i", query.hypernym) in graph.edges[kept]
                seen += 1
    assert seen > 20


def test_the_papers_split_sizes_can_be_asked_for():
    train = kg.questions_per_passage(8376, 10000, random.Random(0))
    assert len(train) == 8376 and sum(train) == 10000 and min(train) >= 1 and max(train) <= 5
    assert kg.questions_per_passage(1967, 9835, random.Random(0)) == [5] * 1967
    with pytest.raises(ValueError, match="cannot be spread"):
        kg.questions_per_passage(10, 51, random.Random(0))


def test_with_aliases_off_only_labels_appear(graph):
    raw, _ = kg.kg(None, {"part": "test", "passages": 4, "questions": 12, "seeds": 300,
                          "aliases": False}, random.Random(5))
    labels = {names[0] for names in graph.names.values()}
    relation_labels = {label for label, _, _ in kg.RELATIONS.values()}
    for p in raw["data"][0]["paragraphs"]:
        for q in p["qas"]:
            assert q["answers"][0]["text"] in labels
        for piece in p["context"][:-2].split(" . "):
            assert any(piece[:at] in labels and piece[at + len(r) + 2:] in labels
                       for r in relation_labels for at in _finds(piece, f" {r} ")), piece


def _finds(text: str, part: str) -> list[int]:
    return [k for k in range(len(text)) if text.startswith(part, k)]


def test_test_and_training_parts_draw_their_passages_from_disjoint_seeds(graph):
    test = kg.part_seeds(graph, "test", 500, 50, 0.2, 0)
    train = kg.part_seeds(graph, "train", 500, 50, 0.2, 0)
    assert len(test) == 100 and len(train) == 400
    assert not set(test) & set(train)
    assert set(test) | set(train) == set(kg.ranked_seeds(graph, 500, 50))
    _, stats = kg.kg(None, {"part": "train", "passages": 3, "questions": 3, "seeds": 500},
                     random.Random(0))
    assert stats["seeds"] == 400


def test_missing_wordnet_files_are_a_one_line_error(tmp_path: Path):
    with pytest.raises(DataError, match="wordnet-base") as caught:
        kg.wordnet_root(tmp_path)
    assert "\n" not in str(caught.value)


def test_the_shipped_test_folder_is_the_generator_at_its_stated_size_and_seed():
    test = testsets.get("kg-wordnet")
    assert test.train == "kg-wordnet-train" and testsets.get(test.train).kind == "training"
    assert testsets.get("kg-wordnet-no-aliases").derive.params["aliases"] is False
    loaded = test.load()
    assert len(loaded.questions) == test.questions == 500
    assert kg.kg(None, dict(test.derive.params), random.Random(test.derive.seeds[0]))[0] == \
        loaded.raw
