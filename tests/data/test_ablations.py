"""Every ablation keeps what the notes say it keeps, on every SQuAD dev example: the answer
text at its offset, token positions for drops, the character multiset for shuffles, whole
sentences for the sentence-order shuffle. POS-dependent ones need spaCy (see docs/derived.md)."""

from __future__ import annotations

import random
import re
from collections import Counter

import pytest

from evaluator.core.hashing import canonical_json
from evaluator.data import derive, nlp
from evaluator.data.derive import ablations, tokens
from evaluator.data.derive.ablations import UNK
from tests.conftest import share_parses

DROPS = {
    "function-words-only": lambda t: t.lower() not in ablations.NLTK_STOPWORDS
    and not ablations._is_punct(t),
    "content-words-only": lambda t: t.lower() in ablations.NLTK_STOPWORDS,
    "logical-words-dropped": lambda t: t.lower() in ablations.LOGICAL_WORDS,
    "causal-words-dropped": lambda t: t.lower() in ablations.CAUSAL_WORDS,
}
SHUFFLES = ("context-words-shuffled", "sentence-words-shuffled", "sentence-order-shuffled")


def run(name: str, raw: dict, seed: int = 1, **params) -> tuple[dict, dict]:
    return derive.get_transform(name).fn(raw, params, random.Random(seed))


def contexts(raw: dict) -> list[tuple[str, dict]]:
    return [(p["context"], qa) for a in raw["data"] for p in a["paragraphs"] for qa in p["qas"]]


def assert_answers_at_offsets(raw: dict) -> int:
    """Every gold answer's span text sits at its offset; returns the number of answers."""
    n = 0
    for context, qa in contexts(raw):
        for ans in qa["answers"]:
            shown = ans.get("span_text", ans["text"])
            assert context[ans["answer_start"]:ans["answer_start"] + len(shown)] == shown, qa["id"]
            n += 1
    return n


def gold(raw: dict) -> dict[str, dict]:
    return {qa["id"]: qa for _, qa in contexts(raw)}


@pytest.mark.parametrize("name", sorted(DROPS))
def test_word_drops_keep_every_position_and_the_gold_text(dev_raw, name):
    new, stats = run(name, dev_raw)
    dropped = 0
    for (_, _, para), out in zip(tokens.paragraphs(dev_raw),
                                 (p for a in new["data"] for p in a["paragraphs"])):
        expected = [UNK if DROPS[name](t) else t for t in para.text.tokens]
        dropped += expected.count(UNK) - para.text.tokens.count(UNK)
        assert out["context"] == para.text.render(expected)[0]
        # positions: the whitespace skeleton is untouched
        assert len(out["context"].split()) == len(para.context.split())
        for qa_in, qa_out in zip(para.qas, out["qas"]):
            assert qa_out["question"] == qa_in["question"]
            assert [a["text"] for a in qa_out["answers"]] == [a["text"] for a in qa_in["answers"]]
    assert dropped == stats["dropped_tokens"] > 0
    assert assert_answers_at_offsets(new) == 34726
    untouched = [a for _, qa in contexts(new) for a in qa["answers"] if "span_text" not in a]
    assert len(untouched) == 34726 - stats["answers_with_dropped_tokens"]


def test_interrogatives_only_keeps_wh_words_and_the_context(dev_raw):
    new, _ = run("q-interrogatives-only", dev_raw)
    before, after = contexts(dev_raw), contexts(new)
    assert [c for c, _ in before] == [c for c, _ in after]
    for (_, q0), (_, q1) in zip(before, after):
        kept = [t for t in tokens.tokenize(q1["question"].replace(UNK, " ")).tokens
                if not ablations._is_punct(t)]
        assert all(t.lower() in ablations.INTERROGATIVES for t in kept)
        assert q1["answers"] == q0["answers"]
        assert q1["question"].count(UNK) + len(kept) == sum(
            not ablations._is_punct(t) for t in tokens.tokenize(q0["question"]).tokens)


def test_empty_question_empties_only_the_question(dev_raw):
    new, _ = run("empty-question", dev_raw)
    assert all(qa["question"] == "" for _, qa in contexts(new))
    assert [c for c, _ in contexts(new)] == [c for c, _ in contexts(dev_raw)]


def test_most_similar_sentences_keeps_exactly_the_maximal_overlap_sentences(dev_raw):
    new, stats = run("most-similar-sentences", dev_raw)
    assert assert_answers_at_offsets(new) == 34726
    outputs = iter(p for a in new["data"] for p in a["paragraphs"])
    for _, _, para in tokens.paragraphs(dev_raw):
        sents = tokens.sentences(para.text)
        for qa in para.qas:
            out = next(outputs)
            qwords = {t.lower() for t in tokens.tokenize(qa["question"]).tokens}
            scores = [ablations.overlap(para.text.tokens[a:b], qwords) for a, b in sents]
            assert len(out["context"].split()) == len(para.context.split())
            masked = [k for k, (a, b) in enumerate(sents) if scores[k] != max(scores)]
            assert out["context"].count(UNK) == sum(sents[k][1] - sents[k][0] for k in masked)
    assert 0 < stats["answer_sentence_dropped"] < 10570


def nonspace(text: str) -> Counter:
    return Counter(ch for ch in text if not ch.isspace())


@pytest.mark.parametrize("name", SHUFFLES)
def test_shuffles_keep_the_characters_and_the_answer_as_one_segment(dev_raw, name):
    new, stats = run(name, dev_raw)
    originals = {qa["id"]: (c, qa) for c, qa in contexts(dev_raw)}
    changed = 0
    for context, qa in contexts(new):
        c0, qa0 = originals[qa["id"]]
        assert nonspace(context) == nonspace(c0)
        anchor = qa0["answers"][0]["text"].strip()
        assert qa["answers"][0]["text"] == anchor
        changed += context != c0
    assert assert_answers_at_offsets(new) == 34726 - stats["alternative_answers_dropped"]
    assert changed > 9000


def test_sentence_word_shuffle_keeps_each_sentence_and_its_last_token(small_dev):
    new, _ = run("sentence-words-shuffled", small_dev)
    for (context, _qa), (c0, _) in zip(contexts(new), contexts(small_dev)):
        assert context.rstrip()[-1] == c0.rstrip()[-1]
    # per sentence: the tokens of sentence k (a multiset) appear as the k-th block
    for _, _, para in tokens.paragraphs(small_dev):
        sents = tokens.sentences(para.text)
        for qa, spans in zip(para.qas, para.spans):
            merged = ablations._merge_sentences(sents, *spans[0])
            out = next(c for c, q in contexts(new) if q["id"] == qa["id"])
            rest = out
            for a, b in merged:
                block = "".join(para.text.tokens[a:b])
                last = para.text.tokens[b - 1]
                n = len(block)
                squeezed = re.sub(r"\s+", "", rest)
                assert Counter(squeezed[:n]) == Counter(block)
                assert squeezed[:n].endswith(last)
                # advance past this sentence in the original string
                taken = 0
                for k, ch in enumerate(rest):
                    if not ch.isspace():
                        taken += 1
                    if taken == n:
                        rest = rest[k + 1:]
                        break


def test_sentence_order_shuffle_keeps_every_sentence_whole(dev_raw):
    new, _ = run("sentence-order-shuffled", dev_raw)
    by_id = {qa["id"]: c for c, qa in contexts(new)}
    for _, _, para in tokens.paragraphs(dev_raw):
        sents = tokens.sentences(para.text)
        for qa, spans in zip(para.qas, para.spans):
            merged = ablations._merge_sentences(sents, *spans[0])
            texts = [para.context[para.text.starts[a]:para.text.starts[b - 1]
                                  + len(para.text.tokens[b - 1])] for a, b in merged]
            out = by_id[qa["id"]]
            assert len(out) == sum(map(len, texts)) + len(texts) - 1
            assert all(t in out for t in texts)


def test_shuffle_seeds_differ_and_each_reproduces(small_dev):
    a1, _ = run("context-words-shuffled", small_dev, seed=1)
    a2, _ = run("context-words-shuffled", small_dev, seed=2)
    assert canonical_json(a1) == canonical_json(
        run("context-words-shuffled", small_dev, seed=1)[0])
    assert canonical_json(a1) != canonical_json(a2)


def test_segments_tile_on_the_answer_grid():
    assert ablations.segments(0, 10, 4, 3) == [(0, 1), (1, 4), (4, 7), (7, 10)]
    assert ablations.segments(0, 5, 0, 5) == [(0, 5)]


def test_tokens_are_cut_at_answer_boundaries():
    text = tokens.tokenize("The 50th game, in 2016.", (4, 6))
    assert text.tokens == ("The", "50", "th", "game", ",", "in", "2016", ".")
    assert text.render(text.tokens)[0] == "The 50th game, in 2016."


# --- POS-dependent ablations (spaCy) ----------------------------------------------------------
@pytest.fixture(scope="module")
def pos_cache(tmp_path_factory, spacy_parses):
    """One annotation cache for the module: the tagger runs once per parent file (in the
    run: the regeneration of the shipped ablations reads the same parses)."""
    cache = tmp_path_factory.mktemp("pos-cache")
    share_parses(cache, spacy_parses)
    return cache


def _spacy_or_skip():
    pytest.importorskip("spacy", reason="POS ablations need spaCy (docs/derived.md)")
    pytest.importorskip(nlp.MODEL_PACKAGE, reason="needs the English pipeline")


def check_pronouns(raw, new, stats):
    assert assert_answers_at_offsets(new) == sum(len(qa["answers"]) for _, qa in contexts(raw))
    ann = ablations.annotate(raw)["contexts"]
    for (_, _, para), tags, out in zip(tokens.paragraphs(raw), ann,
                                       (p for a in new["data"] for p in a["paragraphs"])):
        expected = [UNK if tag in ablations.PRONOUN_TAGS else t
                    for t, (tag, _) in zip(para.text.tokens, tags)]
        assert out["context"] == para.text.render(expected)[0]
    assert stats["dropped_tokens"] > 0


def check_numerics(raw, new, stats):
    assert assert_answers_at_offsets(new) == sum(len(qa["answers"]) for _, qa in contexts(raw))
    assert stats["replaced_tokens"] > 0 and stats["answers_rewritten"] > 0
    for (c0, _), (c1, _) in zip(contexts(raw), contexts(new)):
        assert len(c1.split()) == len(c0.split())


def check_anonymized(raw, new, stats):
    tag = re.compile(r"@(noun|verb|adj|adv|number|wh|prep|punct|period|other)\d+$")
    n_answers = 0
    for context, qa in contexts(new):
        assert all(tag.match(t) for t in context.split())
        assert all(tag.match(t) for t in qa["question"].split())
        for ans in qa["answers"]:
            assert context[ans["answer_start"]:].startswith(ans["text"])
            n_answers += 1
    assert n_answers == sum(len(qa["answers"]) for _, qa in contexts(raw))
    # injective within a paragraph: one word key, one tag; one tag, one word key
    ann = ablations.annotate(raw)["contexts"]
    for (_, _, para), tags, out in zip(tokens.paragraphs(raw), ann,
                                       (p for a in new["data"] for p in a["paragraphs"])):
        pairs = {}
        for tok, (t, lemma), anon in zip(para.text.tokens, tags, out["context"].split()):
            cls = ablations.anon_class(t, tok)
            key = (cls, (lemma or tok).lower() if cls in ablations.INFLECTIONAL else tok.lower())
            pairs.setdefault(anon, set()).add(key)
        assert all(len(keys) == 1 for keys in pairs.values())


POS_CHECKS = {"pronouns-dropped": check_pronouns, "dummy-numerics": check_numerics,
              "vocab-anonymized": check_anonymized}


@pytest.mark.parametrize("name", sorted(POS_CHECKS))
def test_pos_ablations_on_two_articles(small_dev, name, pos_cache, monkeypatch):
    _spacy_or_skip()
    monkeypatch.setenv("QASHIFT_CACHE", str(pos_cache))
    new, stats = run(name, small_dev)
    POS_CHECKS[name](small_dev, new, stats)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(POS_CHECKS))
def test_pos_ablations_on_every_dev_example(dev_raw, name, pos_cache, monkeypatch):
    _spacy_or_skip()
    monkeypatch.setenv("QASHIFT_CACHE", str(pos_cache))
    new, stats = run(name, dev_raw)
    POS_CHECKS[name](dev_raw, new, stats)


def test_anonymization_suffix_option(small_dev, pos_cache, monkeypatch):
    _spacy_or_skip()
    monkeypatch.setenv("QASHIFT_CACHE", str(pos_cache))
    new, _ = run("vocab-anonymized", {"version": "1.1", "data": small_dev["data"][:1]},
                 pos_suffix=True)
    context = contexts(new)[0][0]
    assert re.search(r"@verb\d+ \[VB[DZPNG]?\]", context)
