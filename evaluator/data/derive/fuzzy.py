"""Fuzzy pattern-matching benchmarks (Liu et al.'s FuzzySyntheticQA), from the text here.

Passages of `passage_tokens` tokens come from a source: `uniform` (i.i.d. over the
vocabulary), `trigram` (a 3-gram language model fitted by maximum likelihood to the parent's
passages) or `wikipedia` (the parent's own paragraphs, cut to length). Per passage,
`questions` answer positions are drawn (distinct by default); the question is the answer's
local context of at most `context` tokens with the answer masked (`XXXXX`), corrupted in
order by (1) replacing each other token with probability `replace` by one of its
`neighbours` nearest words, uniformly, (2) a local permutation in which no token moves more
than `window` positions, (3) word dropout at `dropout`. The mask is kept out of all three
unless `protect_mask` is false. The answer is the masked passage token, at its offset.

The vocabulary is the parent's token types that have a vector in spaCy's `en_core_web_md`
(fastText-trained, 300-d: the stand-in for the paper's Common Crawl fastText); neighbours are
exact nearest neighbours by Euclidean distance between L2-normalised vectors, ties broken by
the vocabulary's (sorted) order. Question and
answer generation depends only on the passage and its own seed, never on the source.
"""

from __future__ import annotations

import functools
import random
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from evaluator.data import nlp as spacy_nlp
from evaluator.data.derive import register
from evaluator.data.derive.splits import split_groups

GENERATOR_VERSION = "fuzzy-2"  # 2: ties among neighbours broken by word, the same on every CPU
MASK = "XXXXX"
TOKEN = re.compile(r"\w+(?:[-']\w+)*|[^\w\s]")
SOURCES = ("uniform", "trigram", "wikipedia")
DEFAULTS = {"source": "uniform", "part": "train", "passages": 400, "passage_tokens": 150,
            "questions": 5, "context": 10, "neighbours": 100, "replace": 0.5, "window": 3,
            "dropout": 0.2, "protect_mask": True, "distinct_answers": True}


def tokens_of(text: str) -> list[str]:
    return TOKEN.findall(text)


@functools.lru_cache(maxsize=1)
def _vectors():
    """en_core_web_md's vocabulary and name, loaded once per process (seconds each time)."""
    return spacy_nlp.vectors()


def tools() -> dict[str, str]:
    return {"generator": GENERATOR_VERSION, "vectors": _vectors()[1]}


@dataclass
class Neighbours:
    """The vocabulary and each word's nearest words (exact search, normalised vectors).

    Many words share one vector in `en_core_web_md`, so distances tie often; a word's
    neighbours are the `k` first by (distance, then the word's place in the sorted
    vocabulary), with distances in float64 rounded to 1e-9, so that the choice among ties
    and near-ties is the same on every CPU (a partial sort's order among equal keys, and
    float32 sums, are not)."""

    words: list[str]
    index: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def build(cls, words: list[str], k: int) -> Neighbours:
        """The index of these words' vocabulary; made once per process for a vocabulary
        (every fuzzy set of one parent shares its parent's: six sets of SQuAD dev, 17 s each
        to index). Read only: the one index is handed to each."""
        return _built(tuple(sorted(set(words))), k, _vectors()[1])


@functools.lru_cache(maxsize=2)
def _built(vocabulary: tuple[str, ...], k: int, vectors_id: str) -> Neighbours:
    """`Neighbours.build` of a sorted vocabulary, under the vectors `vectors_id` names."""
    import numpy as np  # lazy: the generators' registry is scanned on every start

    vocab = _vectors()[0]
    words = [w for w in vocabulary if vocab.has_vector(w)]
    vectors = np.stack([vocab.get_vector(w) for w in words]).astype(np.float64)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    n = len(words)
    k = min(k, n - 1)
    margin = min(k + 16, n - 1)  # candidates past k, so ties at the k-th are all seen
    names = np.array(words, dtype=object)
    index = {}
    for s in range(0, n, 1024):
        block = vectors[s:s + 1024]
        rows = np.arange(len(block))
        distance = block @ vectors.T
        distance *= -2  # in place: 2 - 2 cos, the squared L2 of unit vectors (a new
        distance += 2  # array per step costs more, in page faults, than the product)
        distance[rows, s + rows] = np.inf  # not one's own neighbour
        # candidates by the exact distance, ranked by the rounded one: rounding keeps the
        # order (ties aside), so every word outside them rounds to at least the last
        # candidate's distance, and the tie check below sees any that could rank
        top = np.argpartition(distance, margin - 1, axis=1)[:, :margin]
        near = np.round(np.take_along_axis(distance, top, axis=1), 9)
        # each row's candidates by (distance, then place in the vocabulary)
        order = np.lexsort((top, near), axis=1)
        ordered = np.take_along_axis(top, order, axis=1)
        near = np.take_along_axis(near, order, axis=1)
        chosen = names[ordered[:, :k]].tolist()
        if margin < n - 1:  # ties that run past the candidates: every word of the row
            # as near as the k-th, ranked (none outside the candidates is nearer)
            for row in np.flatnonzero(near[:, k - 1] >= near[:, -1]):
                rounded = np.round(distance[row], 9)
                within = np.flatnonzero(rounded <= near[row, k - 1])
                ranked = within[np.lexsort((within, rounded[within]))]
                chosen[row] = names[ranked[:k]].tolist()
        index.update(zip(words[s:s + len(block)], chosen, strict=True))
    return Neighbours(words, index)


def corrupt(context: list[str], mask_at: int, nn: Neighbours, rng: random.Random, *,
            replace: float, window: int, dropout: float, protect_mask: bool
            ) -> tuple[list[str], dict]:
    """The three corruptions in order; the trace says what each did (for the tests)."""
    out, replaced = list(context), []
    for i, word in enumerate(out):
        if (i == mask_at and protect_mask) or word not in nn.index:
            continue
        if rng.random() < replace:
            out[i] = rng.choice(nn.index[word])
            replaced.append((word, out[i]))
    keys = [i + rng.uniform(0, window + 1) for i in range(len(out))]
    if protect_mask:
        keys[mask_at] = mask_at + 0.5 * (window + 1)  # stays put relative to its neighbours
    order = sorted(range(len(out)), key=lambda i: keys[i])
    permuted = [out[i] for i in order]
    kept = [w for w, i in zip(permuted, order, strict=True)
            if (i == mask_at and protect_mask) or rng.random() >= dropout]
    return kept, {"replaced": replaced, "order": order, "dropped": len(out) - len(kept)}


def questions_for(passage: list[str], nn: Neighbours, seed: int, p: dict) -> list[dict]:
    """The questions of one passage: depends on the passage and `seed` only."""
    rng = random.Random(seed)
    words = [i for i, w in enumerate(passage) if w[0].isalnum()]  # never a punctuation mark
    count = min(int(p["questions"]), len(words))
    positions = rng.sample(words, count) if p["distinct_answers"] else \
        [rng.choice(words) for _ in range(count)]
    out = []
    for pos in positions:
        size = int(p["context"])
        left = rng.randint(max(0, pos - size + 1), pos)
        span = passage[left:min(len(passage), left + size)]
        mask_at = pos - left
        context = span[:mask_at] + [MASK] + span[mask_at + 1:]
        question, trace = corrupt(context, mask_at, nn, rng, replace=float(p["replace"]),
                                  window=int(p["window"]), dropout=float(p["dropout"]),
                                  protect_mask=bool(p["protect_mask"]))
        out.append({"position": pos, "answer": passage[pos], "question": question,
                    "trace": trace})
    return out


class Trigram:
    """A 3-gram language model fitted by maximum likelihood (no smoothing: a history seen
    once continues as it did), sampled word by word."""

    def __init__(self, sentences: list[list[str]]):
        self.next: dict[tuple[str, str], Counter] = defaultdict(Counter)
        for words in sentences:
            padded = ["<s>", "<s>", *words, "</s>"]
            for a, b, c in zip(padded, padded[1:], padded[2:]):
                self.next[(a, b)][c] += 1

    def sample(self, n: int, rng: random.Random) -> list[str]:
        out, history = [], ("<s>", "<s>")
        while len(out) < n:
            counts = self.next[history]
            words, weights = zip(*sorted(counts.items()), strict=True)
            word = rng.choices(words, weights)[0]
            if word == "</s>":
                history = ("<s>", "<s>")
                continue
            out.append(word)
            history = (history[1], word)
        return out


def passages(source: str, parent: dict, vocabulary: list[str], count: int, length: int,
             rng: random.Random, part: str = "train") -> list[list[str]]:
    """`count` passages of `length` tokens; real paragraphs come from the parent's `part`
    half (by article, as every train/test split here), so train and test never share one."""
    if source == "wikipedia":
        parent = split_groups(parent, "article")[0 if part == "train" else 1]
    if source == "uniform":
        return [[rng.choice(vocabulary) for _ in range(length)] for _ in range(count)]
    texts = [p["context"] for a in parent["data"] for p in a["paragraphs"]]
    if source == "trigram":
        model = Trigram([tokens_of(t) for t in texts])
        return [model.sample(length, rng) for _ in range(count)]
    if source == "wikipedia":
        chosen = rng.sample(texts, min(count, len(texts)))
        return [tokens_of(t)[:length] for t in chosen]
    raise ValueError(f"fuzzy: source must be one of {', '.join(SOURCES)}, got {source!r}")


def to_squad(passages_: list[list[str]], generated: list[list[dict]], label: str) -> dict:
    paragraphs = []
    for k, (words, questions) in enumerate(zip(passages_, generated, strict=True)):
        starts, at = [], 0
        for w in words:
            starts.append(at)
            at += len(w) + 1
        qas = [{"id": f"{label}-{k}-{j}", "question": " ".join(q["question"]),
                "answers": [{"text": q["answer"], "answer_start": starts[q["position"]]}]}
               for j, q in enumerate(questions)]
        paragraphs.append({"context": " ".join(words), "qas": qas})
    return {"version": GENERATOR_VERSION,
            "data": [{"title": f"fuzzy pattern-matching ({label})", "paragraphs": paragraphs}]}


@register("fuzzy", tools=tools)
def fuzzy(parent: dict, params: dict, rng: random.Random) -> tuple[dict, dict]:
    """Fuzzy pattern-matching QA (Liu et al.): synthetic passages, corrupted cloze questions."""
    unknown = set(params) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"fuzzy: unknown parameter {sorted(unknown)[0]!r}; known: "
                         f"{', '.join(DEFAULTS)}")
    p = {**DEFAULTS, **params}
    words = [w for a in parent["data"] for par in a["paragraphs"]
             for w in tokens_of(par["context"])]
    nn = Neighbours.build(words, int(p["neighbours"]))
    if p["part"] not in ("train", "test"):
        raise ValueError(f"fuzzy: part must be train or test, got {p['part']!r}")
    texts = passages(p["source"], parent, nn.words, int(p["passages"]),
                     int(p["passage_tokens"]), rng, p["part"])
    generated = [questions_for(t, nn, rng.randrange(2**32), p) for t in texts]
    replaced = sum(len(q["trace"]["replaced"]) for g in generated for q in g)
    dropped = sum(q["trace"]["dropped"] for g in generated for q in g)
    return to_squad(texts, generated, f"{p['source']}-{p['part']}"), {
        **p, "vocabulary": len(nn.words), "questions_total": sum(map(len, generated)),
        "replaced_tokens": replaced, "dropped_tokens": dropped}
