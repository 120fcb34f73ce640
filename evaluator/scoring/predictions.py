"""Read a submission's predictions file, trusting nothing about it.

A valid file is one JSON object mapping question id (string) to answer text (string), with
no id given twice. Anything else is a `malformed-predictions` failure, never a score. An
answer longer than MAX_ANSWER_CHARS (far beyond any passage) is scored as wrong, with a
warning, so one huge answer cannot make scoring cost gigabytes.
"""

from __future__ import annotations

import json
from pathlib import Path

from evaluator.core.errors import RunFailure

MAX_BYTES = 512 << 20
MAX_ANSWER_CHARS = 100_000


class Predictions(dict):
    """{question id: answer}; `oversize` lists the ids whose answer was dropped as too long."""

    oversize: list[str]


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise RunFailure("malformed-predictions",
                             f"predictions give question id {key!r} more than once")
        out[key] = value
    return out


def load_predictions(path: Path) -> Predictions:
    if not path.is_file():
        raise RunFailure("no-predictions", f"no predictions file at {path.name}")
    if path.stat().st_size > MAX_BYTES:
        raise RunFailure("malformed-predictions",
                         f"predictions file is larger than {MAX_BYTES >> 20} MiB")
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle, object_pairs_hook=_no_duplicates)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RunFailure("malformed-predictions", f"predictions are not valid JSON ({exc})"
                         ) from None
    except RecursionError:
        raise RunFailure("malformed-predictions", "predictions nest deeper than any JSON "
                         "object of id -> answer text") from None
    if not isinstance(data, dict):
        raise RunFailure("malformed-predictions", f"predictions must be a JSON object "
                         f"{{question_id: answer}}, got a {type(data).__name__}")
    out = Predictions()
    out.oversize = []
    for qid, answer in data.items():
        if not isinstance(answer, str):
            raise RunFailure("malformed-predictions", f"answer for {qid!r} is a "
                             f"{type(answer).__name__}, not a string")
        if len(answer) > MAX_ANSWER_CHARS:
            out.oversize.append(qid)
            answer = ""  # scored as a wrong answer
        out[qid] = answer
    return out
