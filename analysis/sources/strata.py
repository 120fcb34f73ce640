"""Per-question features that stratify a test set (Miller et al. 2020, Section 6.1 and
Appendix C, after Rajpurkar et al. 2016): answer type, syntactic divergence, annotator
agreement, question and answer length, lexical overlap.

Answer types and divergence come from spaCy's small English pipeline (tagger, dependency
parser, NER); the paper used spaCy plus a constituency parser, so, as the paper says of its
own re-implementation, the categories differ slightly from Rajpurkar et al.'s. Each answer is
typed *in its passage*: the first gold answer's span is located by its offset and classified
by the entity that covers most of it, else by the part of speech of its syntactic head.
Features of a test set are cached beside the downloads, keyed by the file's sha256, this
module's VERSION and the pipeline's version.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from evaluator.core import settings
from evaluator.core.files import read_csv_table, write_csv_atomic, write_json_atomic
from evaluator.data import nlp as spacy_nlp
from evaluator.data.testsets import TestSet
from evaluator.scoring.squad_v1 import normalize_answer

VERSION = 1  # bump when a feature's definition changes: the cache key includes it
ANSWER_TYPES = ("date", "other numeric", "person", "location", "other entity",
                "common noun phrase", "adjective phrase", "verb phrase", "clause", "other")
_ENTITY_TYPE = {"DATE": "date", "TIME": "other numeric", "CARDINAL": "other numeric",
                "MONEY": "other numeric", "PERCENT": "other numeric",
                "QUANTITY": "other numeric", "ORDINAL": "other numeric", "PERSON": "person",
                "GPE": "location", "LOC": "location", "FAC": "location"}
_WH_TAGS = {"WDT", "WP", "WP$", "WRB"}
_SUBJECTS = {"nsubj", "nsubjpass", "csubj", "csubjpass", "expl"}


# ------------------------------------------------------------------------ the definitions

def answer_type(span) -> str:
    """Rajpurkar et al.'s answer category of a spaCy span, typed in its sentence."""
    tokens = [t for t in span if not t.is_punct]
    if not tokens:
        return "other"
    for ent in span.doc.ents:
        inside = min(ent.end, span.end) - max(ent.start, span.start)
        if inside * 2 > len(tokens):  # the entity covers most of the answer
            return _ENTITY_TYPE.get(ent.label_, "other entity")
    if all(t.like_num for t in tokens):
        return "other numeric"
    root = span.root
    if root.pos_ in ("VERB", "AUX"):
        has_subject = any(t.dep_ in _SUBJECTS and t.head.i in range(span.start, span.end)
                          for t in span)
        starts_clause = tokens[0].pos_ == "SCONJ" or tokens[0].tag_ in _WH_TAGS
        return "clause" if has_subject or starts_clause else "verb phrase"
    if root.pos_ in ("NOUN", "PROPN", "PRON", "NUM"):
        return "common noun phrase"
    if root.pos_ == "ADJ":
        return "adjective phrase"
    return "other"


def _path(a, b) -> list[tuple[str, str]]:
    """Dependency edges from token a up to the lowest common ancestor, then down to b."""
    up, ancestors = [a], {a.i: 0}
    while up[-1].head.i != up[-1].i:
        up.append(up[-1].head)
        ancestors[up[-1].i] = len(up) - 1
    down = [b]
    while down[-1].i not in ancestors and down[-1].head.i != down[-1].i:
        down.append(down[-1].head)
    if down[-1].i not in ancestors:
        return [("?", "?")] * (len(up) + len(down))  # different sentences: maximal
    lca = ancestors[down[-1].i]
    return ([(t.dep_, "up") for t in up[:lca]]
            + [(t.dep_, "down") for t in reversed(down[:-1])])


def edit_distance(a: Sequence, b: Sequence) -> int:
    """Levenshtein distance between two sequences (unit costs)."""
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, start=1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, start=1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


def syntactic_divergence(question, answer_span) -> int | None:
    """Rajpurkar et al.'s syntactic divergence: over anchors (a question word whose lemma
    also occurs in the answer's sentence, outside the answer), the smallest edit distance
    between the dependency path from the anchor to the wh-word in the question and the
    path from the anchor to the answer's head in the sentence. None without a wh-word or
    an anchor."""
    wh = next((t for t in question if t.tag_ in _WH_TAGS), None)
    if wh is None:
        return None
    sentence, inside = answer_span.sent, range(answer_span.start, answer_span.end)
    by_lemma: dict[str, list] = {}
    for t in sentence:
        if t.i not in inside and not (t.is_stop or t.is_punct):
            by_lemma.setdefault(t.lemma_.lower(), []).append(t)
    best = None
    for q in question:
        if q.i == wh.i or q.is_stop or q.is_punct:
            continue
        for s in by_lemma.get(q.lemma_.lower(), []):
            d = edit_distance(_path(q, wh), _path(s, answer_span.root))
            best = d if best is None else min(best, d)
    return best


def agreement(answers: Iterable[str]) -> int:
    """How many gold answers are identical to the most common one after normalisation."""
    counts = Counter(normalize_answer(a) for a in answers)
    return max(counts.values()) if counts else 0


def lexical_overlap(question, sentence) -> float:
    """Share of the question's content lemmas that occur in the answer's sentence."""
    wanted = {t.lemma_.lower() for t in question if not (t.is_stop or t.is_punct)}
    if not wanted:
        return 0.0
    return len(wanted & {t.lemma_.lower() for t in sentence}) / len(wanted)


# -------------------------------------------------------------------------- per test set

def _nlp():
    return spacy_nlp.pipeline(need="answer types")


def compute(raw: dict) -> dict[str, dict]:
    """Features of every question of a SQuAD-format document, keyed by question id."""
    nlp = _nlp()
    paragraphs = [p for a in raw["data"] for p in a["paragraphs"]]
    out: dict[str, dict] = {}
    contexts = nlp.pipe((p["context"] for p in paragraphs), batch_size=32)
    for paragraph, doc in zip(paragraphs, contexts):
        qas = paragraph["qas"]
        for qa, question in zip(qas, nlp.pipe(qa["question"] for qa in qas)):
            answers = [a["text"] for a in qa.get("answers", [])]
            row = {"agreement": agreement(answers), "question_words": len(qa["question"].split()),
                   "answer_words": len(answers[0].split()) if answers else 0,
                   "answer_type": "other", "divergence": None, "overlap": 0.0}
            first = (qa.get("answers") or [None])[0]
            span = None
            if first is not None and "answer_start" in first:
                start = int(first["answer_start"])
                span = doc.char_span(start, start + len(first["text"]),
                                     alignment_mode="expand")
            if span is not None and len(span):
                row.update(answer_type=answer_type(span),
                           divergence=syntactic_divergence(question, span),
                           overlap=lexical_overlap(question, span.sent))
            out[str(qa["id"])] = row
    return out


def features_key() -> str:
    """What the features depend on besides the file: this module's VERSION and the
    pipeline's version."""
    return f"v{VERSION}-" + spacy_nlp.versions()["model"].replace("==", "-")


def cache_path(sha256: str) -> Path:
    """Beside the downloads: the features depend on the file, this code and the pipeline."""
    return settings.cache_dir() / "strata" / f"{sha256}-{features_key()}.json"


def cached(sha256: str) -> dict[str, dict] | None:
    """The features of the file with this sha256 if computed before, else None."""
    path = cache_path(sha256)
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def of_testset(ts: TestSet) -> dict[str, dict]:
    """The features of a test set's questions, computed once per file and cached."""
    dataset = ts.load()
    found = cached(dataset.sha256)
    if found is not None:
        return found
    path = cache_path(dataset.sha256)
    found = compute(dataset.raw)
    write_json_atomic(path, found)
    return found


# --------------------------------------------------------------------------------- strata

def stratum(kind: str, row: dict) -> str | None:
    """The stratum of one question under a stratification; None leaves it out."""
    if kind == "answer_type":
        return row["answer_type"]
    if kind == "divergence":
        d = row["divergence"]
        return None if d is None else (str(d) if d < 8 else "8+")
    if kind == "agreement":
        return str(min(row["agreement"], 3)) + ("+" if row["agreement"] >= 3 else "")
    if kind == "question_words":
        return _bin(row["question_words"], (6, 9, 12), " words", whole=True)
    if kind == "answer_words":
        return _bin(row["answer_words"], (1, 2, 3, 5), " words", whole=True)
    if kind == "overlap":
        return _bin(row["overlap"], (0.25, 0.5, 0.75), " overlap")
    raise ValueError(f"unknown stratification {kind!r}")


STRATIFICATIONS = ("answer_type", "divergence", "agreement", "question_words", "answer_words",
                   "overlap")


def _bin(value: float, edges: tuple, unit: str, whole: bool = False) -> str:
    """"<= a", "a-b" (whole numbers: "a+1-b"), ..., "> last"; right edges included."""
    lo = None
    for edge in edges:
        if value <= edge:
            if lo is None:
                return f"<= {edge:g}{unit}"
            first = lo + 1 if whole else lo
            return f"{first:g}{unit}" if first == edge else f"{first:g}-{edge:g}{unit}"
        lo = edge
    return f"> {edges[-1]:g}{unit}"


# ---------------------------------------------------------------------- the stratum table

TABLE_COLUMNS = ("system", "testset", "testset_sha256", "features", "stratification",
                 "stratum", "n", "f1")


def read_table(path: Path) -> list[dict]:
    """The rows of a stratum table (`qashift strata --table`); none if the file is absent.
    Each row is one system's question count and mean F1 (percent) in one stratum of one
    test set, with the set's sha256 and the `features_key` its strata were assigned by."""
    return [{**r, "n": int(r["n"]), "f1": float(r["f1"])}
            for r in read_csv_table(path, TABLE_COLUMNS, "a stratum table")]


def write_table(rows: Iterable[dict], path: Path) -> None:
    """Write a stratum table in a stable order (system, test set, stratification, stratum)."""
    ordered = sorted(rows, key=lambda r: (r["system"], r["testset"], r["stratification"],
                                          r["stratum"]))
    write_csv_atomic(path, TABLE_COLUMNS,
                     [{**r, "f1": f"{float(r['f1']):.10g}"} for r in ordered])
