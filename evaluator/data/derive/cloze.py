"""Cloze benchmarks in the style of the Children's Book Test (Hill et al. 2016), built from
the passages here, as Liu et al. convert cloze sets to extractive QA.

Each paragraph of the parent with at least `min_sentences` sentences gives one question: the
passage is every sentence before the last, the query the last sentence with one word
blanked (`XXXXX`): a named-entity word (`kind: ne`) or a common noun (`kind: cn`), chosen
among those that also occur in the passage; the answer is that word's first occurrence in the
passage (the paper's conversion). With `queries: every`, every sentence from the
`min_sentences`-th on is a query in turn, its passage the sentences before it (CBT's
questions slide along a book the same way): a few questions per paragraph instead of one,
for passage sources too small to give a trainable set otherwise; each source paragraph is
then an article, so intervals cluster its questions. Candidate lists are not kept.
Entities and nouns come from spaCy's `en_core_web_sm` pipeline, sentences from its
rule-based sentencizer; `max_paragraphs` draws that many paragraphs of the parent first and
`max_questions` that many of the questions made (both seeded).
"""

from __future__ import annotations

import random
import re

from evaluator.core.hashing import canonical_json, sha256_bytes
from evaluator.data import nlp as spacy_nlp
from evaluator.data.derive import register

GENERATOR_VERSION = "cloze-2"  # 2: whitespace after the last sentence is no sentence
MASK = "XXXXX"
KINDS = ("ne", "cn")


PARSE_VERSION = "cloze-parse-1"  # what a cached parse of the passages holds (see `parse`)


def _pipeline():
    """The tagger with its attribute ruler (for cn's nouns) and the entity recogniser (for
    ne's entities; it has its own token vectors, so the tagger's presence changes nothing it
    finds); sentences from the rule-based sentencizer (the parser would triple the cost)."""
    return spacy_nlp.pipeline(("parser", "lemmatizer"), sentencizer=True,
                              need="the cloze generator")


def _candidates(sentence, kind: str) -> list[list]:
    """[start, word] of each single-word blank of a sentence: entity words (ne) or common
    nouns (cn)."""
    if kind == "ne":
        return [[t.idx, t.text] for t in sentence if t.ent_type_ and t.is_alpha and not t.is_stop]
    return [[t.idx, t.text] for t in sentence
            if t.pos_ == "NOUN" and t.is_alpha and not t.is_stop]


def parse(paragraphs: list[str]) -> list[dict]:
    """For each paragraph, {"text", "sentences": [{"start", "text", "ne", "cn"}]}: its
    non-blank sentences and each one's candidate blanks of both kinds. Computed once per
    passages and spaCy version and kept in the cache, so that the ne and the cn set of one
    source cost one parse."""
    def compute() -> list[dict]:
        return [{"text": doc.text, "sentences": [
            {"start": s.start_char, "text": s.text, "ne": _candidates(s, "ne"),
             "cn": _candidates(s, "cn")}
            for s in doc.sents if s.text.strip()]}  # New-Wiki's paragraphs end in a newline
            for doc in _pipeline().pipe(paragraphs, batch_size=64)]
    return spacy_nlp.cached("cloze-parses", {
        "paragraphs": sha256_bytes(canonical_json(paragraphs)), "parse": PARSE_VERSION}, compute)


def first_occurrence(passage: str, word: str) -> int:
    found = re.search(rf"(?<!\w){re.escape(word)}(?!\w)", passage)
    return -1 if found is None else found.start()


def questions(paragraphs: list[str], kind: str, rng: random.Random, min_sentences: int,
              every: bool = False) -> list[dict]:
    """Cloze questions {id, paragraph, passage, question, answer, answer_start}: one per
    usable paragraph (its last sentence), or with `every` one per usable sentence from the
    `min_sentences`-th on."""
    out = []
    for k, parsed in enumerate(parse(paragraphs)):
        sentences = parsed["sentences"]
        if len(sentences) < min_sentences:
            continue
        at = range(min_sentences - 1, len(sentences)) if every else [len(sentences) - 1]
        for i in at:
            query = sentences[i]
            passage = parsed["text"][:query["start"]].rstrip()
            usable = [c for c in query[kind] if first_occurrence(passage, c[1]) >= 0]
            if not usable:
                continue
            idx, word = rng.choice(usable)
            start = idx - query["start"]
            question = query["text"][:start] + MASK + query["text"][start + len(word):]
            out.append({"id": f"cloze-{kind}-{k}" + (f"-{i}" if every else ""),
                        "paragraph": k, "sentence": i, "passage": passage,
                        "question": question.strip(), "answer": word,
                        "answer_start": first_occurrence(passage, word)})
    return out


def _entry(q: dict) -> dict:
    """A SQuAD paragraph holding one cloze question."""
    return {"context": q["passage"], "qas": [{
        "id": q["id"], "question": q["question"],
        "answers": [{"text": q["answer"], "answer_start": q["answer_start"]}]}]}


@register("cloze", tools=lambda: {"generator": GENERATOR_VERSION, **spacy_nlp.versions()})
def cloze(parent: dict, params: dict, rng: random.Random) -> tuple[dict, dict]:
    """CBT-style cloze questions (named entities or common nouns) from the parent's passages."""
    kind = str(params.get("kind", "ne"))
    if kind not in KINDS:
        raise ValueError(f"cloze: kind must be ne or cn, got {kind!r}")
    min_sentences = int(params.get("min_sentences", 3))
    rule = params.get("queries", "last")
    if rule not in ("last", "every"):
        raise ValueError(f"cloze: queries must be last or every, got {rule!r}")
    paragraphs = [p["context"] for a in parent["data"] for p in a["paragraphs"]]
    most = params.get("max_paragraphs")
    if most is not None and len(paragraphs) > int(most):
        keep = sorted(rng.sample(range(len(paragraphs)), int(most)))
        paragraphs = [paragraphs[k] for k in keep]
    made = questions(paragraphs, kind, rng, min_sentences, every=rule == "every")
    limit = params.get("max_questions")
    if limit is not None and len(made) > int(limit):
        made = sorted(rng.sample(made, int(limit)), key=lambda q: (q["paragraph"], q["sentence"]))
    if rule == "every":  # an article per source paragraph: its questions form one cluster
        by_source: dict[int, list[dict]] = {}
        for q in made:
            by_source.setdefault(q["paragraph"], []).append(_entry(q))
        data = [{"title": f"cloze ({kind}) paragraph {k}", "paragraphs": entries}
                for k, entries in by_source.items()]
    else:
        data = [{"title": f"cloze ({kind})", "paragraphs": [_entry(q) for q in made]}]
    raw = {"version": GENERATOR_VERSION, "data": data}
    return raw, {"kind": kind, "paragraphs": len(paragraphs), "questions": len(made),
                 "min_sentences": min_sentences, "queries": rule}
