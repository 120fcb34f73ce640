"""The SAM generator: a 4,200-triple set is deterministic in its seed, balanced, and every
triple satisfies the invariants of the notes; the validator catches each kind of breakage."""

from __future__ import annotations

import copy
from collections import Counter

import pytest

from evaluator.core.hashing import canonical_json
from evaluator.data import derive
from evaluator.data.derive import sam


@pytest.fixture(scope="module")
def triples() -> list[sam.Triple]:
    return sam.generate_triples(4200, seed=0)


def test_a_4200_triple_set_passes_the_validator(triples):
    assert len(triples) == 4200
    assert sam.validate_triples(triples) == []
    assert len({t.id for t in triples}) == 4200


def test_generation_is_deterministic_and_the_seed_matters(triples):
    again = sam.generate_triples(4200, seed=0)
    assert again == triples
    other = sam.generate_triples(4200, seed=1)
    assert [t.baseline_sentences for t in other] != [t.baseline_sentences for t in triples]


def test_categories_counts_and_question_types_are_balanced(triples):
    assert Counter(t.category for t in triples) == {c: 700 for c in sam.CATEGORIES}
    assert Counter(t.count for t in triples) == {1: 1400, 2: 1400, 3: 1400}
    assert Counter(t.question_type for t in triples) == {q: 840 for q in sam.QUESTION_TYPES}
    assert all(len(t.modified) == t.count for t in triples)
    assert all(len(t.baseline_sentences) == 6 for t in triples)


def test_the_modification_is_an_inserted_expression_of_its_category(triples):
    t = next(t for t in triples if t.category == "Adverbial Modification")
    for k in t.modified:
        b, i = t.baseline_sentences[k], t.intervention_sentences[k]
        assert any(word in i and word not in b for word in ("almost", "nearly", "all but"))
    assert t.answers[0] in " ".join(t.baseline_sentences)
    assert t.answers[1] in " ".join(t.control_sentences)


def test_template_permutations_are_unique_within_a_set():
    # _realise records every (event order, goal templates, other templates) it uses
    used: set = set()
    rng = __import__("random").Random(3)
    for _ in range(300):
        plan = sam._plan(rng, "who-ordinal", 1)
        before = len(used)
        sam._realise(rng, plan, "Modal negation", used)
        assert len(used) == before + 1


def squad_parts(triples):
    return [sam.to_squad(triples, part) for part in sam.PARTS]


@pytest.mark.parametrize("breakage, message", [
    ("same-answer", "A' equals A"),
    ("edit-outside", "B and I differ outside the modified sentences"),
    ("control-keeps", "C is not I without the modified sentences"),
    ("bad-offset", "an answer offset is wrong"),
    ("missing-id", "do not share the same question ids"),
])
def test_the_validator_catches_broken_triples(triples, breakage, message):
    b, i, c = copy.deepcopy(squad_parts(triples[:12]))
    qa_b = b["data"][0]["paragraphs"][0]["qas"][0]
    qa_i = i["data"][0]["paragraphs"][0]["qas"][0]
    para_b, para_i, para_c = (x["data"][0]["paragraphs"][0] for x in (b, i, c))
    if breakage == "same-answer":
        qa_i["answers"][0]["text"] = qa_b["answers"][0]["text"]
    elif breakage == "edit-outside":
        untouched = next(k for k in range(6) if k not in qa_i["sam"]["modified_sentences"])
        sents = sam.split_sentences(para_i["context"])
        sents[untouched] = sents[untouched].replace(" in the ", " during the ", 1)
        para_i["context"] = " ".join(sents)
    elif breakage == "control-keeps":
        para_c["context"] = para_i["context"]
    elif breakage == "bad-offset":
        qa_b["answers"][0]["answer_start"] += 1
    else:
        para_c["qas"] = []
    problems = sam.validate_files(b, i, c)
    assert problems and any(message in p for p in problems)
    assert sam.validate_files(*squad_parts(triples[:12])) == []


def test_the_three_parts_are_registered_derive_outputs_aligned_by_id():
    spec = {p: derive.DeriveSpec(None, "sam-football", {"triples": 30, "part": p}, (5,))
            for p in sam.PARTS}
    parts = {p: derive.generate(s, None)[0] for p, s in spec.items()}
    assert sam.validate_files(parts["baseline"], parts["intervention"], parts["control"]) == []
    assert canonical_json(parts["baseline"]) == canonical_json(
        derive.generate(spec["baseline"], None)[0])
