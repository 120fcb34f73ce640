#!/usr/bin/env python3
"""Sliding-window baseline for extractive QA (SQuAD v1.1 format).

Usage: python3 sliding_window.py INPUT OUTPUT

The MCTest sliding-window baseline of Richardson, Burges & Renshaw (2013), adapted to span
extraction as described by Rajpurkar et al. (2016, "Sliding Window Baseline"):

1. Candidates: token n-grams (1..MAX_CANDIDATE_TOKENS) inside one sentence that do not start
   or end with a stopword or punctuation, contain no clause punctuation and are not made only
   of question words (the SQuAD paper used parse constituents; we have no parser).
2. Overlap: for every candidate, the number of question content unigrams plus question bigrams
   that occur in the candidate's sentence *outside* the candidate. Only candidates with the
   maximal overlap are kept.
3. Among those: the MCTest sliding-window score (window of |Q u A| tokens slid over the
   passage, summing IC(w) = log(1 + 1/C(w)) for passage words in Q u A) minus the MCTest
   distance penalty; remaining ties go to the candidate closest (in tokens, within its
   sentence) to a question word, then the shorter one, then the earliest one.

Standard library only; deterministic; reads only "context", "id" and "question".
See README.md in this folder for the design decisions.
"""

from __future__ import annotations

import json
import math
import re
import sys
import time
from typing import NoReturn

MAX_CANDIDATE_TOKENS = 3

# Numbers with internal separators stay one token ("1,000", "3.5"); otherwise runs of word
# characters, and every other non-space character on its own.
TOKEN_RE = re.compile(r"\d+(?:[.,]\d+)*|\w+|[^\w\s]")

# Punctuation that may appear *inside* a candidate ("Levi's", "Denver, Colorado", "A.D.",
# "anti-war", "24–10"); anything else (brackets, quotes, ; : ! ?) stops a candidate.
INNER_PUNCT = frozenset({",", ".", "'", "’", "-", "–", "—", "&", "/"})
SENTENCE_END = frozenset({".", "!", "?"})

# English function words, plus a few words that are common in questions but never answers
# ("name", "called", "type"). The tokenizer splits "don't" into "don", "'", "t", so the
# contracted forms are listed by their pieces.
STOPWORDS = frozenset(
    """
    a about above across after again against all along also although am among an and any are
    aren around as at be because been before being below between both but by can cannot could
    couldn d did didn do does doesn doing don down during each else even ever few for from
    further had hadn has hasn have haven having he her here hers herself him himself his how
    however i if in into is isn it its itself just ll m may me might more most much must
    mustn my myself no nor not of off often on once only onto or other ought our ours
    ourselves out over own per re s same shall shan she should shouldn since so some still
    such t than that the their theirs them themselves then there these they this those though
    through to too toward towards under until up upon usually ve very via was wasn we well
    were weren what when where which while who whom whose why will with within without won
    would wouldn yet you your yours yourself yourselves
    many name named called kind type
    """.split()
)


def tokenize(text: str) -> list[tuple[str, int, int]]:
    """(lower-cased token, start char, end char) for every token of ``text``."""
    return [(m.group().lower(), m.start(), m.end()) for m in TOKEN_RE.finditer(text)]


def is_word(tok: str) -> bool:
    return tok[0].isalnum() or tok[0] == "_"


class Passage:
    """Everything about one context that does not depend on the question."""

    def __init__(self, context: str) -> None:
        self.context = context
        toks = tokenize(context)
        self.toks = toks
        words = [t for t, _, _ in toks]
        self.lower = words
        self.isword = [is_word(t) for t in words]

        # Word-only view of the passage for the sliding window (punctuation is skipped).
        pwords = [w for w, isw in zip(words, self.isword) if isw]
        self.pwords = pwords
        counts: dict[str, int] = {}
        positions: dict[str, list[int]] = {}
        for j, w in enumerate(pwords):
            counts[w] = counts.get(w, 0) + 1
            positions.setdefault(w, []).append(j)
        self.ic = {w: math.log(1.0 + 1.0 / c) for w, c in counts.items()}
        self.positions = positions

        # Sentences as [start, end) token ranges.
        sents = []
        start = 0
        n = len(toks)
        for i, (t, _, e) in enumerate(toks):
            if t in SENTENCE_END and i + 1 < n:
                nxt = toks[i + 1]
                gap = context[e : nxt[1]]
                if gap and not context[nxt[1]].islower() and not _is_abbrev(toks, i):
                    sents.append((start, i + 1))
                    start = i + 1
        if start < n:
            sents.append((start, n))
        self.sents = sents

        # Candidate spans per sentence: (start token, end token inclusive, distinct words).
        cands = []
        for s0, s1 in sents:
            lst = []
            for i in range(s0, s1):
                if not self.isword[i] or words[i] in STOPWORDS:
                    continue
                j = i
                nwords = 0
                while j < s1:
                    t = words[j]
                    if self.isword[j]:
                        nwords += 1
                        if nwords > MAX_CANDIDATE_TOKENS:
                            break
                        if t not in STOPWORDS:
                            # Distinct words in text order (a tuple, not a set, so that
                            # float sums never depend on the hash seed).
                            ws = tuple(
                                dict.fromkeys(words[k] for k in range(i, j + 1) if self.isword[k])
                            )
                            lst.append((i, j, ws))
                    elif t not in INNER_PUNCT:
                        break
                    elif t == "," and not (
                        j + 1 < s1
                        and _capital(context, toks, j - 1)
                        and _capital(context, toks, j + 1)
                    ):
                        # A comma stays inside a candidate only between capitalised words or
                        # numbers ("Santa Clara, California", "February 7, 2016").
                        break
                    j += 1
            cands.append(lst)
        self.cands = cands


def _capital(context: str, toks: list[tuple[str, int, int]], i: int) -> bool:
    c = context[toks[i][1]]
    return c.isupper() or c.isdigit()


def _is_abbrev(toks: list[tuple[str, int, int]], i: int) -> bool:
    """A '.' right after a single letter ("J. Smith", "U.S.") does not end a sentence."""
    if toks[i][0] != "." or i == 0:
        return False
    prev = toks[i - 1]
    return prev[2] == toks[i][1] and len(prev[0]) == 1 and prev[0].isalpha()


class Question:
    """The question as a set of words, of content words (no stopwords) and of bigrams."""

    def __init__(self, text: str) -> None:
        qwords = [t for t, _, _ in tokenize(text) if is_word(t)]
        self.words = frozenset(qwords)
        self.content = frozenset(w for w in qwords if w not in STOPWORDS)
        self.bigrams = frozenset(zip(qwords, qwords[1:]))


def sentence_terms(p: Passage, q: Question, s0: int, s1: int) -> dict[object, list[int]]:
    """Matched question terms in one sentence -> [min last token, max first token] of hits."""
    terms: dict[object, list[int]] = {}
    prev = -1
    for i in range(s0, s1):
        if not p.isword[i]:
            continue
        w = p.lower[i]
        if w in q.content:
            r = terms.get(w)
            if r is None:
                terms[w] = [i, i]
            else:
                r[1] = i
        if prev >= 0:
            bg = (p.lower[prev], w)
            if bg in q.bigrams:
                r = terms.get(bg)
                if r is None:
                    terms[bg] = [i, prev]
                else:
                    r[1] = prev
        prev = i
    return terms


def window_sums(vals: list[float], w: int) -> list[float]:
    """Sum of every window of ``w`` consecutive values, via prefix sums."""
    pre = [0.0]
    acc = 0.0
    for v in vals:
        acc += v
        pre.append(acc)
    return [pre[i + w] - pre[i] for i in range(len(vals) - w + 1)]


def answer(p: Passage, q: Question) -> str:
    if not p.toks:
        return ""

    # Steps 1-2: candidates with maximal overlap (sentence by sentence, best sentences first).
    sent_terms = []
    for si, (s0, s1) in enumerate(p.sents):
        terms = sentence_terms(p, q, s0, s1)
        sent_terms.append((len(terms), si, terms))
    sent_terms.sort(key=lambda x: (-x[0], x[1]))
    best = -1
    pool: list[tuple[int, int, int, tuple[str, ...]]] = []
    for total, si, terms in sent_terms:
        if total < best:
            break
        spans = list(terms.values())
        for s, e, ws in p.cands[si]:
            if all(x in q.words for x in ws):
                continue
            lost = 0
            for lo, hi in spans:
                if lo >= s and hi <= e:
                    lost += 1
            ov = total - lost
            if ov > best:
                best = ov
                pool = [(s, e, si, ws)]
            elif ov == best:
                pool.append((s, e, si, ws))
    if not pool:
        # No usable candidate anywhere: fall back to the first word of the passage.
        for i, isw in enumerate(p.isword):
            if isw:
                _, a, b = p.toks[i]
                return p.context[a:b]
        return ""

    if len(pool) > 1:
        pool = rerank(p, q, pool)
    s, e = pool[0][0], pool[0][1]
    return p.context[p.toks[s][1] : p.toks[e][2]]


def rerank(p: Passage, q: Question, pool: list) -> list:
    """Order the max-overlap candidates by MCTest SW - D, then the local distance tie-breaker."""
    n = len(p.pwords)
    qvals = [p.ic[w] if w in q.words else 0.0 for w in p.pwords]
    wsum_cache: dict[int, tuple[list[float], float]] = {}

    # Distance (in words) from every passage word to the nearest question content word.
    big = n + 1
    near = [big] * n
    last = -big
    for j, w in enumerate(p.pwords):
        if w in q.content:
            last = j
        near[j] = j - last
    last = 2 * big
    for j in range(n - 1, -1, -1):
        if p.pwords[j] in q.content:
            last = j
        near[j] = min(near[j], last - j)
    has_q = any(w in q.content for w in p.pwords)

    scored = []
    for s, e, si, ws in pool:
        aonly = [w for w in ws if w not in q.words]
        w = min(len(q.words) + len(aonly), n)
        cached = wsum_cache.get(w)
        if cached is None:
            sums = window_sums(qvals, w)
            cached = (sums, max(sums))
            wsum_cache[w] = cached
        sums, sw = cached

        # Each passage occurrence of an answer-only word adds IC to every window containing
        # it: a step function over window starts. Max of (Q windows + steps) per segment.
        events: dict[int, float] = {}
        m = len(sums)
        for a in aonly:
            ica = p.ic.get(a)
            if ica is None:
                continue
            for pos in p.positions[a]:
                lo = max(0, pos - w + 1)
                hi = min(m - 1, pos)
                events[lo] = events.get(lo, 0.0) + ica
                events[hi + 1] = events.get(hi + 1, 0.0) - ica
        if events:
            keys = sorted(events)
            cur = 0.0
            for k, k2 in zip(keys, keys[1:]):
                cur += events[k]
                if cur > 1e-12 and k < m:
                    cand = cur + max(sums[k:k2])
                    if cand > sw:
                        sw = cand

        # MCTest distance: min word distance between question content words and the
        # candidate's (non-question, non-stopword) words anywhere in the passage, / (|P| - 1).
        acontent = [a for a in aonly if a not in STOPWORDS and a in p.positions]
        if has_q and acontent and n > 1:
            d = min(near[j] for a in acontent for j in p.positions[a]) / (n - 1)
        else:
            d = 1.0

        # Tie-breaker: token distance inside the sentence from the span to a question word.
        s0, s1 = p.sents[si]
        local = big
        for i in range(s0, s1):
            if p.isword[i] and p.lower[i] in q.content and not (s <= i <= e):
                dist = s - i if i < s else i - e
                if dist < local:
                    local = dist
        scored.append((-round(sw - d, 9), local, e - s, s, (s, e, si, ws)))
    scored.sort(key=lambda x: x[:4])
    return [x[4] for x in scored]


def fail(msg: str) -> NoReturn:
    print(f"sliding_window.py: error: {msg}", file=sys.stderr)
    sys.exit(2)


def load(path: str) -> list[tuple[str, list[tuple[str, str]]]]:
    """[(context, [(question id, question)])], validating the SQuAD structure."""
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except OSError as exc:
        fail(f"cannot read input {path!r}: {exc.strerror or exc}")
    except UnicodeDecodeError as exc:
        fail(f"input {path!r} is not UTF-8: {exc}")
    except json.JSONDecodeError as exc:
        fail(f"input {path!r} is not valid JSON: {exc}")
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
        fail(f"input {path!r} is not SQuAD-format JSON (no top-level 'data' list)")
    out = []
    for ai, article in enumerate(doc["data"]):
        paras = article.get("paragraphs") if isinstance(article, dict) else None
        if not isinstance(paras, list):
            fail(f"data[{ai}] has no 'paragraphs' list")
        for pi, para in enumerate(paras):
            where = f"data[{ai}].paragraphs[{pi}]"
            if not isinstance(para, dict) or not isinstance(para.get("context"), str):
                fail(f"{where} has no string 'context'")
            qas = para.get("qas")
            if not isinstance(qas, list):
                fail(f"{where} has no 'qas' list")
            items = []
            for qi, qa in enumerate(qas):
                if (
                    not isinstance(qa, dict)
                    or not isinstance(qa.get("id"), str)
                    or not isinstance(qa.get("question"), str)
                ):
                    fail(f"{where}.qas[{qi}] needs string 'id' and 'question'")
                items.append((qa["id"], qa["question"]))
            out.append((para["context"], items))
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python3 sliding_window.py INPUT OUTPUT", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    paragraphs = load(argv[1])
    total = sum(len(items) for _, items in paragraphs)
    print(f"sliding-window: {total} questions in {len(paragraphs)} paragraphs", file=sys.stderr)
    preds: dict[str, str] = {}
    done = 0
    step = max(1000, total // 10)
    for context, items in paragraphs:
        passage = Passage(context)
        for qid, qtext in items:
            preds[qid] = answer(passage, Question(qtext))
            done += 1
            if done % step == 0:
                print(f"sliding-window: {done}/{total}", file=sys.stderr)
    try:
        with open(argv[2], "w", encoding="utf-8") as fh:
            json.dump(preds, fh, ensure_ascii=False)
            fh.write("\n")
    except OSError as exc:
        fail(f"cannot write output {argv[2]!r}: {exc.strerror or exc}")
    dt = time.monotonic() - t0
    print(f"sliding-window: wrote {len(preds)} answers to {argv[2]} in {dt:.1f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
