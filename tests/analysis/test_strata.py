"""Question features after Rajpurkar et al. 2016, on hand-made sentences."""

from __future__ import annotations

import pytest

from analysis.sources import strata


@pytest.fixture(scope="module")
def nlp():
    return strata._nlp()


def span(nlp, text, answer):
    doc = nlp(text)
    start = text.index(answer)
    return doc.char_span(start, start + len(answer), alignment_mode="expand")


@pytest.mark.parametrize("text,answer,expected", [
    ("John bought a car in December 1998 in Paris.", "December 1998", "date"),
    ("John bought a car in December 1998 in Paris.", "Paris", "location"),
    ("John bought a car in December 1998 in Paris.", "John", "person"),
    ("John bought three cars.", "three", "other numeric"),
    ("The company Acme Corporation sells rockets.", "Acme Corporation", "other entity"),
    ("John bought the red car yesterday.", "the red car", "common noun phrase"),
    ("The tower was very tall.", "very tall", "adjective phrase"),
    ("The tower was built to protect the city.", "to protect the city", "verb phrase"),
    ("The tower fell because the river flooded the town.",
     "because the river flooded the town", "clause"),
    ("He ran very quickly.", "very quickly", "other"),  # an adverb phrase fits no category
])
def test_answer_types(nlp, text, answer, expected):
    assert strata.answer_type(span(nlp, text, answer)) == expected


def test_divergence_is_zero_for_the_same_structure_and_positive_for_a_passive(nlp):
    what = nlp("What did John buy?")
    assert strata.syntactic_divergence(what, span(nlp, "John bought a car.", "a car")) == 0
    who = nlp("Who wrote Hamlet?")
    active = span(nlp, "Shakespeare wrote Hamlet.", "Shakespeare")
    passive = span(nlp, "Hamlet was written by Shakespeare.", "Shakespeare")
    assert strata.syntactic_divergence(who, active) == 0
    # anchor "write": [nsubj down] in the question, [agent down, pobj down] in the sentence
    assert strata.syntactic_divergence(who, passive) == 2


def test_no_wh_word_or_no_anchor_gives_no_divergence(nlp):
    assert strata.syntactic_divergence(nlp("Name the author."),
                                       span(nlp, "Shakespeare wrote it.", "Shakespeare")) is None
    assert strata.syntactic_divergence(nlp("Who sang?"),
                                       span(nlp, "Shakespeare wrote it.", "Shakespeare")) is None


def test_edit_distance_agreement_and_overlap(nlp):
    assert strata.edit_distance("kitten", "sitting") == 3
    assert strata.edit_distance([], ["a", "b"]) == 2
    assert strata.agreement(["The Cat", "cat", "a cat.", "dog"]) == 3  # normalised alike
    question = nlp("When did the river flood the town?")
    assert strata.lexical_overlap(question, nlp("The river flooded it.")) == pytest.approx(
        2 / 3)  # river, flood of {river, flood, town}


@pytest.mark.parametrize("kind,row,expected", [
    ("divergence", {"divergence": 3}, "3"), ("divergence", {"divergence": 11}, "8+"),
    ("divergence", {"divergence": None}, None), ("agreement", {"agreement": 1}, "1"),
    ("agreement", {"agreement": 5}, "3+"), ("question_words", {"question_words": 6}, "<= 6 words"),
    ("question_words", {"question_words": 8}, "7-9 words"),
    ("question_words", {"question_words": 20}, "> 12 words"),
    ("answer_words", {"answer_words": 2}, "2 words"), ("overlap", {"overlap": 0.5},
                                                      "0.25-0.5 overlap"),
])
def test_strata_bins(kind, row, expected):
    assert strata.stratum(kind, row) == expected
