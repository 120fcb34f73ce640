"""The text model the input ablations work on: regex tokens (cut at every gold-answer
boundary, so each answer is a whole number of tokens), a rule sentence splitter, paragraphs
with their answers' token spans, and the bookkeeping that carries answers to a rewritten
context. No tagger, no model: the same input gives the same tokens on every machine."""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

TOKENIZER_VERSION = "qashift-regex/1"

TOKEN_RE = re.compile(r"\d+(?:[.,]\d+)+(?!\w)|\w+(?:['’-]\w+)*|[^\w\s]")
SENTENCE_END = {".", "!", "?"}
CLOSERS = {'"', "'", ")", "]", "”", "’"}
ABBREVIATIONS = {"mr", "mrs", "ms", "dr", "st", "jr", "sr", "vs", "inc", "co", "ltd", "no",
                 "gen", "col", "lt", "sgt", "prof", "rev", "fig", "approx", "ca", "c", "e.g",
                 "i.e", "etc", "u.s", "u.k", "jan", "feb", "mar", "apr", "aug", "sept", "sep",
                 "oct", "nov", "dec", "mt", "ft", "vol"}


# --- text model -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Text:
    """A string cut into tokens; `gaps[i]` is what precedes token i (gaps[-1] trails)."""
    tokens: tuple[str, ...]
    starts: tuple[int, ...]
    gaps: tuple[str, ...]

    def render(self, tokens: list[str] | tuple[str, ...], min_gap: str = "") -> tuple[str,
                                                                                       list[int]]:
        """Join new token strings with the original gaps; returns the text and token starts."""
        parts, starts, pos = [], [], 0
        for i, tok in enumerate(tokens):
            gap = self.gaps[i] if (self.gaps[i] or i == 0) else min_gap
            parts.append(gap)
            pos += len(gap)
            starts.append(pos)
            parts.append(tok)
            pos += len(tok)
        parts.append(self.gaps[len(tokens)] if len(self.gaps) > len(tokens) else "")
        return "".join(parts), starts


def tokenize(text: str, cuts: tuple[int, ...] = ()) -> Text:
    """Regex tokens, additionally split at each offset in `cuts` (answer boundaries)."""
    spans = [m.span() for m in TOKEN_RE.finditer(text)]
    if cuts:
        cut_set = sorted(set(cuts))
        out = []
        for s, e in spans:
            lo = bisect.bisect_right(cut_set, s)
            hi = bisect.bisect_left(cut_set, e)
            points = [s, *cut_set[lo:hi], e]
            out.extend((a, b) for a, b in zip(points, points[1:]) if a < b)
        spans = out
    gaps, prev = [], 0
    for s, e in spans:
        gaps.append(text[prev:s])
        prev = e
    gaps.append(text[prev:])
    return Text(tuple(text[s:e] for s, e in spans), tuple(s for s, _ in spans), tuple(gaps))


def token_span(text: Text, start: int, end: int) -> tuple[int, int]:
    """Token indices [a, b) covering the characters [start, end)."""
    a = bisect.bisect_right(text.starts, start) - 1
    b = bisect.bisect_left(text.starts, end)
    return max(a, 0), b


def sentences(text: Text) -> list[tuple[int, int]]:
    """Sentence token ranges [a, b) by the rule splitter."""
    out, begin, toks = [], 0, text.tokens
    n = len(toks)
    i = 0
    while i < n:
        if toks[i] in SENTENCE_END:
            j = i + 1
            while j < n and toks[j] in CLOSERS and not text.gaps[j]:
                j += 1
            prev = toks[i - 1].lower() if i > 0 else ""
            abbreviation = toks[i] == "." and not text.gaps[i] and (
                prev in ABBREVIATIONS or (len(prev) == 1 and prev.isalpha()))
            nxt = toks[j] if j < n else ""
            starts_new = j == n or (bool(text.gaps[j]) and (nxt[:1].isupper() or nxt[:1].isdigit()
                                                            or nxt[:1] in "\"“'‘("))
            if starts_new and not abbreviation:
                out.append((begin, j))
                begin = j
                i = j
                continue
        i += 1
    if begin < n:
        out.append((begin, n))
    return out


# --- per-paragraph iteration ------------------------------------------------------------------
@dataclass
class Paragraph:
    context: str
    text: Text
    qas: list[dict]
    spans: list[list[tuple[int, int]]]  # per question, per answer: token span [a, b)


def paragraphs(raw: dict) -> Iterator[tuple[int, dict, Paragraph]]:
    """Every paragraph tokenised with cuts at all of its answers' boundaries."""
    for a_index, article in enumerate(raw["data"]):
        for paragraph in article["paragraphs"]:
            context = paragraph["context"]
            cuts = []
            for qa in paragraph["qas"]:
                for ans in qa.get("answers", []):
                    s, e = answer_chars(context, ans)
                    cuts += [s, e]
            text = tokenize(context, tuple(cuts))
            spans = [[token_span(text, *answer_chars(context, ans)) for ans in qa["answers"]]
                     for qa in paragraph["qas"]]
            yield a_index, article, Paragraph(context, text, paragraph["qas"], spans)


def answer_chars(context: str, answer: dict) -> tuple[int, int]:
    s = int(answer["answer_start"])
    e = s + len(answer["text"])
    while s < e and context[s].isspace():
        s += 1
    while e > s and context[e - 1].isspace():
        e -= 1
    return s, e


def rebuild(raw: dict, make: Callable[[int, dict, Paragraph], list[dict]]) -> dict:
    """A new file with the same articles, each paragraph replaced by `make`'s paragraphs."""
    out: dict[int, dict] = {}
    for a_index, article, para in paragraphs(raw):
        entry = out.setdefault(a_index, {"title": article.get("title", ""), "paragraphs": []})
        entry["paragraphs"].extend(make(a_index, article, para))
    return {"version": raw.get("version", ""), "data": [out[i] for i in sorted(out)]}


# --- span bookkeeping -------------------------------------------------------------------------
def mapped_answers(qa: dict, spans: list[tuple[int, int]], context: str, starts: list[int],
                    ends: list[int], gold: str) -> list[dict]:
    """Answers carried to a new context where token i now lies at [starts[i], ends[i]).

    gold='original' keeps the original string for scoring; 'span' scores the new span text."""
    answers = []
    for ans, (a, b) in zip(qa["answers"], spans):
        s, e = starts[a], ends[b - 1]
        span_text = context[s:e]
        text = ans["text"] if gold == "original" else span_text
        entry = {"text": text, "answer_start": s}
        if span_text != text:
            entry["span_text"] = span_text
        if span_text != ans["text"]:
            entry["original_text"] = ans["text"]
        answers.append(entry)
    return answers


def token_ends(starts: list[int], tokens: list[str]) -> list[int]:
    return [s + len(t) for s, t in zip(starts, tokens)]
