"""Read a submission's predictions file, trusting nothing about it.

A valid file is one JSON object mapping question id (string) to answer text (string), with
no id given twice. Anything else is a `malformed-predictions` failure, never a score.
"""

from __future__ import annotations

import json
from pathlib import Path

from evaluator.core.errors import RunFailure

MAX_BYTES = 512 << 20


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise RunFailure("malformed-predictions",
                             f"predictions give question id {key!r} more than once")
        out[key] = value
    return out


def load_predictions(path: Path) -> dict[str, str]:
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
    if not isinstance(data, dict):
        raise RunFailure("malformed-predictions", f"predictions must be a JSON object "
                         f"{{question_id: answer}}, got a {type(data).__name__}")
    for qid, answer in data.items():
        if not isinstance(answer, str):
            raise RunFailure("malformed-predictions", f"answer for {qid!r} is a "
                             f"{type(answer).__name__}, not a string")
    return data
