"""Input ablations of Sugawara et al. (AAAI 2020) as registered derive transforms.

Each transform maps a SQuAD-format file to another one. Local decisions where the paper is
silent (all documented in docs/derived.md and tested in tests/data/test_ablations.py):

- Tokens (`tokens.py`): `TOKEN_RE` (numbers with separators, words with inner apostrophes or
  hyphens, single punctuation marks), cut additionally at every gold-answer boundary so that
  each answer is a whole number of tokens. Sentences: a rule splitter (. ! ? then a capital,
  a digit or an opening quote, not after a known abbreviation or a single capital letter).
- Drops (sigma 1-3, 5, 10-12) replace each dropped token by `[UNK]`: token count and
  positions are kept. The gold `text` stays the ORIGINAL answer string (scoring cannot be
  fooled by a prediction of other `[UNK]`s); `answer_start` points at the same tokens in the
  new context and `span_text` is what is there now. sigma 10-12 act on the context only.
- Rewrites (sigma 4, 9) change the answer's own tokens: the gold becomes the rewritten span.
- Shuffles (sigma 6-8) keep the first gold answer (the anchor) as one intact segment;
  another gold answer is kept only if its tokens are still contiguous and in order, and the
  dropped ones are counted. Question-dependent transforms (sigma 5-8) give every question its
  own copy of the context (one paragraph per question).
"""

from __future__ import annotations

import random
from collections.abc import Callable

from evaluator.core.hashing import canonical_json, sha256_bytes
from evaluator.data import nlp as spacy_nlp
from evaluator.data.derive import register
from evaluator.data.derive.tokens import (
    TOKENIZER_VERSION,
    Paragraph,
    Text,
    mapped_answers,
    paragraphs,
    rebuild,
    sentences,
    token_ends,
    tokenize,
)

UNK = "[UNK]"

# The NLTK English stopword list as shipped with NLTK 3.x before 2024 (179 words); [S] uses
# "a set of stopwords from NLTK". Written out here so that no corpus download is needed.
NLTK_STOPWORDS = frozenset("""
i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself
yourselves he him his himself she she's her hers herself it it's its itself they them their
theirs themselves what which who whom this that that'll these those am is are was were be been
being have has had having do does did doing a an the and but if or because as until while of
at by for with about against between into through during before after above below to from up
down in out on off over under again further then once here there when where why how all any
both each few more most other some such no nor not only own same so than too very s t can will
just don don't should should've now d ll m o re ve y ain aren aren't couldn couldn't didn
didn't doesn doesn't hadn hadn't hasn hasn't haven haven't isn isn't ma mightn mightn't mustn
mustn't needn needn't shan shan't shouldn shouldn't wasn wasn't weren weren't won won't wouldn
wouldn't""".split())
STOPWORDS_VERSION = "nltk-english-179"
INTERROGATIVES = frozenset({"what", "when", "where", "who", "whom", "whose", "which", "why",
                            "how"})
LOGICAL_WORDS = frozenset({"all", "any", "each", "every", "few", "if", "more", "most", "no",
                           "nor", "not", "other", "same", "some", "than"})
CAUSAL_WORDS = frozenset({"as", "because", "cause", "since", "therefore", "why"})
PRONOUN_TAGS = frozenset({"PRP", "PRP$"})
ANON_CLASSES = (
    ("noun", {"NN", "NNS", "NNP", "NNPS"}), ("verb", {"VB", "VBD", "VBG", "VBN", "VBP", "VBZ"}),
    ("adj", {"JJ", "JJR", "JJS"}), ("adv", {"RB", "RBR", "RBS"}), ("number", {"CD"}),
    ("wh", {"WDT", "WP", "WP$", "WRB"}), ("prep", {"IN", "TO"}), ("period", {"."}),
    ("punct", {",", ":", "-LRB-", "-RRB-", "``", "''", "HYPH", "NFP"}),
)
INFLECTIONAL = frozenset({"noun", "verb", "adj", "adv"})


def _drop_context(para: Paragraph, drop: list[bool], stats: dict,
                  keep_question: Callable[[dict], dict] | None = None) -> dict:
    tokens = [UNK if d else t for t, d in zip(para.text.tokens, drop)]
    context, starts = para.text.render(tokens)
    ends = token_ends(starts, tokens)
    qas = []
    for qa, spans in zip(para.qas, para.spans):
        answers = mapped_answers(qa, spans, context, starts, ends, gold="original")
        stats["answers"] += len(answers)
        stats["answers_with_dropped_tokens"] += sum(any(drop[a:b]) for a, b in spans)
        new_qa = {"id": qa["id"], "question": qa["question"], "answers": answers}
        qas.append(keep_question(new_qa) if keep_question else new_qa)
    stats["tokens"] += len(tokens)
    stats["dropped_tokens"] += sum(drop)
    return {"context": context, "qas": qas}


def _drop_stats() -> dict:
    return {"tokens": 0, "dropped_tokens": 0, "answers": 0, "answers_with_dropped_tokens": 0}


def _is_punct(token: str) -> bool:
    return not any(ch.isalnum() for ch in token)


def _word_drop(predicate: Callable[[str], bool]) -> Callable[[dict], tuple[dict, dict]]:
    def run(raw: dict) -> tuple[dict, dict]:
        stats = _drop_stats()
        new = rebuild(raw, lambda _a, _art, p: [_drop_context(
            p, [predicate(t) for t in p.text.tokens], stats)])
        return new, stats
    return run


def _tools(*extra: str) -> Callable[[], dict[str, str]]:
    def tools() -> dict[str, str]:
        out = {"tokenizer": TOKENIZER_VERSION}
        if "stopwords" in extra:
            out["stopwords"] = STOPWORDS_VERSION
        if "spacy" in extra:
            out.update(spacy_nlp.versions())
        return out
    return tools


# --- sigma 1 and the empty question -----------------------------------------------------------
def _question_only(keep: Callable[[str], bool]) -> Callable[[dict], dict]:
    def edit(qa: dict) -> dict:
        q = tokenize(qa["question"])
        tokens = [t if keep(t) else UNK for t in q.tokens]
        return {**qa, "question": q.render(tokens)[0]}
    return edit


@register("q-interrogatives-only", tools=_tools())
def interrogatives_only(raw: dict, params: dict, rng: random.Random) -> tuple[dict, dict]:
    """sigma_1: every question word except wh-words and 'how' becomes [UNK] (punctuation kept)."""
    stats = {"questions": 0}
    keep = _question_only(lambda t: t.lower() in INTERROGATIVES or _is_punct(t))

    def make(_a, _art, p: Paragraph) -> list[dict]:
        stats["questions"] += len(p.qas)
        return [{"context": p.context, "qas": [keep({**qa, "answers": qa["answers"]})
                                               for qa in p.qas]}]
    return rebuild(raw, make), stats


@register("empty-question", tools=_tools())
def empty_question(raw: dict, params: dict, rng: random.Random) -> tuple[dict, dict]:
    """All question words dropped ([S] Table 3): the question is the empty string."""
    def make(_a, _art, p: Paragraph) -> list[dict]:
        return [{"context": p.context, "qas": [{**qa, "question": ""} for qa in p.qas]}]
    return rebuild(raw, make), {}


# --- sigma 2, 3, 10, 12: word-list drops ------------------------------------------------------
@register("function-words-only", tools=_tools("stopwords"))
def function_words_only(raw: dict, params: dict, rng: random.Random) -> tuple[dict, dict]:
    """sigma_2: context content words (not NLTK stopwords, not punctuation) become [UNK]."""
    return _word_drop(lambda t: t.lower() not in NLTK_STOPWORDS and not _is_punct(t))(raw)


@register("content-words-only", tools=_tools("stopwords"))
def content_words_only(raw: dict, params: dict, rng: random.Random) -> tuple[dict, dict]:
    """sigma_3: context function words (NLTK stopwords) become [UNK]; punctuation is kept."""
    return _word_drop(lambda t: t.lower() in NLTK_STOPWORDS)(raw)


@register("logical-words-dropped", tools=_tools())
def logical_words_dropped(raw: dict, params: dict, rng: random.Random) -> tuple[dict, dict]:
    """sigma_10: the logical terms of [S] App. B become [UNK] in the context."""
    return _word_drop(lambda t: t.lower() in LOGICAL_WORDS)(raw)


@register("causal-words-dropped", tools=_tools())
def causal_words_dropped(raw: dict, params: dict, rng: random.Random) -> tuple[dict, dict]:
    """sigma_12: the causal terms of [S] App. B become [UNK] in the context."""
    return _word_drop(lambda t: t.lower() in CAUSAL_WORDS)(raw)


# --- sigma 5: most similar sentences ----------------------------------------------------------
def overlap(sentence_tokens: tuple[str, ...] | list[str], question_words: set[str]) -> int:
    """Unigram overlap: lower-cased non-punctuation sentence tokens found in the question."""
    return sum(1 for t in sentence_tokens if not _is_punct(t) and t.lower() in question_words)


@register("most-similar-sentences", tools=_tools())
def most_similar_sentences(raw: dict, params: dict, rng: random.Random) -> tuple[dict, dict]:
    """sigma_5: keep the sentences with maximal unigram overlap with the question (all ties);
    the other sentences' tokens become [UNK]."""
    stats = {**_drop_stats(), "answer_sentence_dropped": 0}

    def make(_a, _art, p: Paragraph) -> list[dict]:
        sents = sentences(p.text)
        out = []
        for qa, spans in zip(p.qas, p.spans):
            qwords = {t.lower() for t in tokenize(qa["question"]).tokens if not _is_punct(t)}
            scores = [overlap(p.text.tokens[a:b], qwords) for a, b in sents]
            best = max(scores)
            drop = [False] * len(p.text.tokens)
            for (a, b), score in zip(sents, scores):
                if score != best:
                    drop[a:b] = [True] * (b - a)
            a0, b0 = spans[0]
            stats["answer_sentence_dropped"] += all(drop[a0:b0])
            single = Paragraph(p.context, p.text, [qa], [spans])
            out.append(_drop_context(single, drop, stats))
        return out
    return rebuild(raw, make), stats


# --- sigma 6, 7, 8: shuffles ------------------------------------------------------------------
def segments(lo: int, hi: int, anchor: int, length: int) -> list[tuple[int, int]]:
    """Tile [lo, hi) into pieces of `length` on a grid through `anchor`; ends may be shorter."""
    cuts = {lo, hi}
    point = anchor
    while point > lo:
        cuts.add(point)
        point -= length
    point = anchor
    while point < hi:
        cuts.add(point)
        point += length
    ordered = sorted(c for c in cuts if lo <= c <= hi)
    return [(a, b) for a, b in zip(ordered, ordered[1:]) if a < b]


def _join_pieces(text: Text, pieces: list[tuple[int, int]]) -> tuple[str, list[int], list[int]]:
    """Concatenate token ranges (internal gaps kept, one space between pieces); returns the
    context and, per original token index, its new start and end."""
    parts, pos = [], 0
    starts = [0] * len(text.tokens)
    ends = [0] * len(text.tokens)
    for k, (a, b) in enumerate(pieces):
        if k:
            parts.append(" ")
            pos += 1
        for i in range(a, b):
            if i > a:
                parts.append(text.gaps[i])
                pos += len(text.gaps[i])
            starts[i] = pos
            parts.append(text.tokens[i])
            pos += len(text.tokens[i])
            ends[i] = pos
    return "".join(parts), starts, ends


def _shuffled_qa(qa: dict, spans: list[tuple[int, int]], context: str, starts: list[int],
                 ends: list[int], order: list[int], stats: dict) -> dict:
    """Keep the anchor answer and every other answer still contiguous and in order."""
    position = {tok: k for k, tok in enumerate(order)}
    kept = []
    for a, b in spans:
        pos = [position[i] for i in range(a, b)]
        if pos == list(range(pos[0], pos[0] + len(pos))):
            kept.append({"text": context[starts[a]:ends[b - 1]], "answer_start": starts[a]})
        else:
            stats["alternative_answers_dropped"] += 1
    stats["answers"] += len(kept)
    return {"id": qa["id"], "question": qa["question"], "answers": kept}


def _merge_sentences(sents: list[tuple[int, int]], a: int, b: int) -> list[tuple[int, int]]:
    """Merge the sentences that the token span [a, b) touches into one."""
    touching = [k for k, (s, e) in enumerate(sents) if s < b and a < e]
    if len(touching) <= 1:
        return sents
    first, last = touching[0], touching[-1]
    return [*sents[:first], (sents[first][0], sents[last][1]), *sents[last + 1:]]


def _shuffle_stats() -> dict:
    return {"questions": 0, "answers": 0, "alternative_answers_dropped": 0}


def _per_question_shuffle(raw: dict, rng: random.Random,
                          pieces_for: Callable[[Paragraph, tuple[int, int], random.Random],
                                               list[tuple[int, int]]]) -> tuple[dict, dict]:
    stats = _shuffle_stats()

    def make(_a, _art, p: Paragraph) -> list[dict]:
        out = []
        for qa, spans in zip(p.qas, p.spans):
            pieces = pieces_for(p, spans[0], rng)
            context, starts, ends = _join_pieces(p.text, pieces)
            order = [i for a, b in pieces for i in range(a, b)]
            stats["questions"] += 1
            out.append({"context": context,
                        "qas": [_shuffled_qa(qa, spans, context, starts, ends, order, stats)]})
        return out
    return rebuild(raw, make), stats


@register("context-words-shuffled", tools=_tools())
def context_words_shuffled(raw: dict, params: dict, rng: random.Random) -> tuple[dict, dict]:
    """sigma_6: the context, cut into answer-length segments aligned on the answer, shuffled."""
    def pieces(p: Paragraph, anchor: tuple[int, int], rng: random.Random):
        a, b = anchor
        segs = segments(0, len(p.text.tokens), a, b - a)
        rng.shuffle(segs)
        return segs
    return _per_question_shuffle(raw, rng, pieces)


@register("sentence-words-shuffled", tools=_tools())
def sentence_words_shuffled(raw: dict, params: dict, rng: random.Random) -> tuple[dict, dict]:
    """sigma_7: within each sentence, answer-length segments shuffled; the last token (or the
    answer segment, when it ends the sentence) stays last."""
    def pieces(p: Paragraph, anchor: tuple[int, int], rng: random.Random):
        a, b = anchor
        out = []
        for s, e in _merge_sentences(sentences(p.text), a, b):
            if s <= a < e:
                if b == e:
                    fixed, segs = (a, b), segments(s, a, a, b - a)
                else:
                    fixed, segs = (e - 1, e), segments(s, e - 1, a, b - a)
            else:
                fixed, segs = (e - 1, e), segments(s, e - 1, s, b - a)
            rng.shuffle(segs)
            out.extend([*segs, fixed])
        return out
    return _per_question_shuffle(raw, rng, pieces)


@register("sentence-order-shuffled", tools=_tools())
def sentence_order_shuffled(raw: dict, params: dict, rng: random.Random) -> tuple[dict, dict]:
    """sigma_8: the order of the sentences shuffled (sentences the answer spans are merged)."""
    def pieces(p: Paragraph, anchor: tuple[int, int], rng: random.Random):
        sents = _merge_sentences(sentences(p.text), *anchor)
        rng.shuffle(sents)
        return sents
    return _per_question_shuffle(raw, rng, pieces)


# --- POS-dependent: sigma 4, 9, 11 ------------------------------------------------------------
def _nlp():
    return spacy_nlp.pipeline(("parser", "ner", "senter"), need="this ablation (a POS tagger)")


def annotate(raw: dict) -> dict[str, list[list[tuple[str, str]]]]:
    """(tag, lemma) for every token of every context and question, in file order, computed on
    our own tokens by spaCy's tagger and lemmatizer; cached on disk per parent and versions."""
    def compute() -> dict[str, list[list[tuple[str, str]]]]:
        nlp = _nlp()
        from spacy.tokens import Doc  # lazy: spaCy loads in seconds

        contexts, questions = [], []
        for _a, _art, p in paragraphs(raw):
            contexts.append(p.text)
            questions.extend(tokenize(qa["question"]) for qa in p.qas)

        def run(texts: list[Text]) -> list[list[tuple[str, str]]]:
            docs = (Doc(nlp.vocab, words=list(t.tokens) or [""],
                        spaces=[bool(g) for g in t.gaps[1:]] or [False]) for t in texts)
            return [[(tok.tag_, tok.lemma_) for tok in doc][:len(t.tokens)]
                    for doc, t in zip(nlp.pipe(docs, batch_size=256), texts)]
        return {"contexts": run(contexts), "questions": run(questions)}
    return spacy_nlp.cached("annotations", {"parent": sha256_bytes(canonical_json(raw)),
                                            "tokenizer": TOKENIZER_VERSION}, compute)


def anon_class(tag: str, token: str) -> str:
    for name, tags in ANON_CLASSES:
        if tag in tags:
            return name
    return "punct" if _is_punct(token) else "other"


@register("pronouns-dropped", tools=_tools("spacy"))
def pronouns_dropped(raw: dict, params: dict, rng: random.Random) -> tuple[dict, dict]:
    """sigma_11: context tokens tagged PRP or PRP$ become [UNK]."""
    tags = iter(annotate(raw)["contexts"])
    stats = _drop_stats()

    def make(_a, _art, p: Paragraph) -> list[dict]:
        ann = next(tags)
        return [_drop_context(p, [tag in PRONOUN_TAGS for tag, _ in ann], stats)]
    return rebuild(raw, make), stats


@register("dummy-numerics", tools=_tools("spacy"))
def dummy_numerics(raw: dict, params: dict, rng: random.Random) -> tuple[dict, dict]:
    """sigma_9: context tokens tagged CD become random integers in [low, high], the same
    (lower-cased) token getting the same number within a context; gold answers follow."""
    low, high = int(params.get("low", 1000)), int(params.get("high", 10000))
    tags = iter(annotate(raw)["contexts"])
    stats = {"tokens": 0, "replaced_tokens": 0, "answers": 0, "answers_rewritten": 0}

    def make(_a, _art, p: Paragraph) -> list[dict]:
        ann = next(tags)
        mapping: dict[str, str] = {}
        tokens = list(p.text.tokens)
        for i, (tag, _) in enumerate(ann):
            if tag == "CD":
                key = tokens[i].lower()
                if key not in mapping:
                    value = str(rng.randint(low, high))
                    while value == tokens[i]:
                        value = str(rng.randint(low, high))
                    mapping[key] = value
                tokens[i] = mapping[key]
                stats["replaced_tokens"] += 1
        stats["tokens"] += len(tokens)
        context, starts = p.text.render(tokens)
        ends = token_ends(starts, tokens)
        qas = []
        for qa, spans in zip(p.qas, p.spans):
            answers = mapped_answers(qa, spans, context, starts, ends, gold="span")
            stats["answers"] += len(answers)
            stats["answers_rewritten"] += sum("original_text" in x for x in answers)
            qas.append({"id": qa["id"], "question": qa["question"], "answers": answers})
        return [{"context": context, "qas": qas}]
    return rebuild(raw, make), stats


@register("vocab-anonymized", tools=_tools("spacy"))
def vocab_anonymized(raw: dict, params: dict, rng: random.Random) -> tuple[dict, dict]:
    """sigma_4: every context and question token replaced by @class{ID} (Table 5 + @other);
    IDs per paragraph, context first, keyed by lemma for nouns/verbs/adjectives/adverbs and
    by the lower-cased word otherwise; `pos_suffix: true` appends ' [TAG]' to inflected ones."""
    suffix = bool(params.get("pos_suffix", False))
    ann = annotate(raw)
    contexts, questions = iter(ann["contexts"]), iter(ann["questions"])
    stats = {"tokens": 0, "vocabulary": set()}

    def make(_a, _art, p: Paragraph) -> list[dict]:
        ids: dict[tuple[str, str], str] = {}
        counters: dict[str, int] = {}

        def anonymize(text: Text, tags: list[tuple[str, str]]) -> list[str]:
            out = []
            for tok, (tag, lemma) in zip(text.tokens, tags):
                cls = anon_class(tag, tok)
                word = (lemma or tok).lower() if cls in INFLECTIONAL else tok.lower()
                if (cls, word) not in ids:
                    ids[(cls, word)] = f"@{cls}{counters.get(cls, 0)}"
                    counters[cls] = counters.get(cls, 0) + 1
                new = ids[(cls, word)]
                out.append(f"{new} [{tag}]" if suffix and cls in INFLECTIONAL else new)
            return out
        tokens = anonymize(p.text, next(contexts))
        context, starts = p.text.render(tokens, min_gap=" ")
        ends = token_ends(starts, tokens)
        qas = []
        for qa, spans in zip(p.qas, p.spans):
            q = tokenize(qa["question"])
            question = q.render(anonymize(q, next(questions)), min_gap=" ")[0]
            answers = mapped_answers(qa, spans, context, starts, ends, gold="span")
            qas.append({"id": qa["id"], "question": question, "answers": answers})
        stats["tokens"] += len(tokens)
        stats["vocabulary"].update(t.split(" ")[0].rstrip("0123456789") for t in tokens)
        return [{"context": context, "qas": qas}]
    new = rebuild(raw, make)
    stats["vocabulary"] = sorted(stats["vocabulary"])
    return new, stats
