"""Read a submission's predictions file, trusting nothing about it.

A valid file is one JSON object mapping question id (string) to answer text (string), with
no id given twice. Anything else is a `malformed-predictions` failure, never a score. An
answer longer than MAX_ANSWER_CHARS (far beyond any passage) is scored as wrong, with a
warning, so one huge answer cannot make scoring cost gigabytes. Nor can many tiny values:
parsed, each JSON value costs some fifty bytes or more, so a file of a million `0,` or `[],`
would take twenty times its size in memory; a file for n questions may hold at most
VALUES_PER_QUESTION * n + SPARE_VALUES of them (counted, before parsing, by the bytes that
can start one), far above what real answers need.
"""

from __future__ import annotations

import os
from pathlib import Path

from evaluator.core.errors import RunFailure
from evaluator.core.gate import Refused, parse_json, read_bounded

MAX_BYTES = 512 << 20
MAX_ANSWER_CHARS = 100_000
VALUES_PER_QUESTION = 64  # an id, its answer, and room for commas and colons in the answer
SPARE_VALUES = 4096


class Predictions(dict):
    """{question id: answer}; `oversize` lists the ids whose answer was dropped as too long,
    and `raw` holds the bytes read, the ones to keep (the file is never read twice)."""

    oversize: list[str]
    raw: bytes


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise RunFailure("malformed-predictions",
                             f"predictions give question id {key!r} more than once")
        out[key] = value
    return out


def check_values(data: bytes, questions: int, what: str,
                 per_question: int = VALUES_PER_QUESTION,
                 marks: tuple[bytes, ...] = (b",", b":", b"[", b"{")) -> None:
    """Refuse, before parsing, a JSON document that may hold more values than `questions`
    answers need: parsing a small value such as `{}` costs about 25 times its bytes. Every
    value after a container's first follows a comma and keys precede a colon, so counting
    `marks` bounds the values; counting only `[` and `{` bounds the containers, the values
    that cost the most memory."""
    most = 1 + sum(data.count(mark) for mark in marks)
    allowed = per_question * questions + SPARE_VALUES
    if most > allowed:
        kind = "JSON values" if b"," in marks else "JSON objects and lists"
        raise RunFailure("malformed-predictions", f"{what} may hold {most:,} {kind}, "
                         f"over the {allowed:,} allowed for {questions:,} questions")


def load_predictions(path: Path, questions: int | None = None) -> Predictions:
    """The predictions file, through the bounded reader (a link, FIFO or device is refused,
    the size capped before parsing); for a test set of `questions`, the number of values too."""
    if not os.path.lexists(path):
        raise RunFailure("no-predictions", f"no predictions file at {path.name}")
    data = raw = read_bounded(path, MAX_BYTES, f"the predictions file {path.name}")
    if questions is not None:
        check_values(data, questions, "the predictions file")
    try:
        data = parse_json(data, "the predictions file", object_pairs_hook=_no_duplicates)
    except Refused as exc:
        raise RunFailure("malformed-predictions", str(exc)) from None
    if not isinstance(data, dict):
        raise RunFailure("malformed-predictions", f"predictions must be a JSON object "
                         f"{{question_id: answer}}, got a {type(data).__name__}")
    out = Predictions()
    out.oversize, out.raw = [], raw
    for qid, answer in data.items():
        if not isinstance(answer, str):
            raise RunFailure("malformed-predictions", f"answer for {qid!r} is a "
                             f"{type(answer).__name__}, not a string")
        if len(answer) > MAX_ANSWER_CHARS:
            out.oversize.append(qid)
            answer = ""  # scored as a wrong answer
        out[qid] = answer
    return out
