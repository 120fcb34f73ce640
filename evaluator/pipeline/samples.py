"""Per-question logs of a cell: one JSON line per question with its question text, gold
answers, the prediction and its official EM/F1, plus the question's strata (answer type,
syntactic divergence, ...) when they have been computed for the set (and Parquet beside it
when pyarrow is installed). For an adversarial-min set the lines are per question; the
set's total is the mean over question groups, so the lines' mean differs from it there.
Both files are written whole through `write_atomic`: a link at their path is replaced, never
followed."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from evaluator.core.files import READABLE, write_atomic
from evaluator.data.testsets import Dataset
from evaluator.scoring.squad_v1 import score_question

FIELDS = ("id", "article", "question", "answers", "prediction", "em", "f1", "missing")


def sample_rows(dataset: Dataset, predictions: Mapping[str, str],
                features: Mapping[str, dict] | None = None) -> Iterator[dict]:
    for article in dataset.raw["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                answers = [a["text"] for a in qa.get("answers", [])]
                prediction = predictions.get(str(qa["id"]))
                em, f1 = score_question(prediction, answers)
                yield {"id": str(qa["id"]), "article": article.get("title", ""),
                       "question": qa["question"], "answers": answers,
                       "prediction": prediction or "", "em": float(em), "f1": float(f1),
                       "missing": prediction is None,
                       **((features or {}).get(str(qa["id"])) or {})}


def file_stem(bundle: str, testset: str) -> str:
    """`BUNDLE.TESTSET` as a file name: every file of a cell written for a user (these logs,
    `results export`) is named by it, a trained system's `/` (any character a name should
    not hold) written `_`."""
    return re.sub(r"[^A-Za-z0-9_.@~-]", "_", f"{bundle}.{testset}")


def write_samples(dataset: Dataset, predictions: Mapping[str, str], out_dir: Path,
                  bundle: str, testset: str, features: Mapping[str, dict] | None = None
                  ) -> list[Path]:
    """`<out_dir>/<bundle>.<testset>.jsonl` (and `.parquet` with pyarrow); the paths.
    `features`: per question id, extra columns (the strata)."""
    stem = file_stem(bundle, testset)
    rows = list(sample_rows(dataset, predictions, features))
    target = out_dir / f"{stem}.jsonl"
    write_atomic(target, b"".join(json.dumps(row, ensure_ascii=False).encode() + b"\n"
                                  for row in rows), READABLE)
    written = [target]
    try:
        import pyarrow  # lazy: optional; without it the JSON lines are the log
        import pyarrow.parquet  # lazy: optional, as above
    except ImportError:
        return written
    buffer = io.BytesIO()  # pyarrow opens a path as it finds it: a link there is followed
    pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows), buffer)
    write_atomic(out_dir / f"{stem}.parquet", buffer.getvalue(), READABLE)
    return [*written, out_dir / f"{stem}.parquet"]
