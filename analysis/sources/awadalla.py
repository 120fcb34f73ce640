"""Awadalla et al. (2022), "Exploring The Landscape of Distributional Robustness for Question
Answering Models" (Findings of EMNLP): their public results table, as this project's long
form.

Source: github.com/anas-awadalla/robustness-in-nlp-streamlit, file
`results/extractive_question_answering.csv` at commit 1548091 (columns model_name,
model_family, dataset, f1, f1_lower, f1_upper, type). `results/awadalla-2022.csv` is its
SQuAD and SQuADShifts rows converted by this module:

    python -m analysis.sources.awadalla THEIR.csv > results/awadalla-2022.csv

Their `dataset` names map to this project's test-set ids (SQuAD v1.1 dev and the four
SQuADShifts sets, each compared with SQuAD dev); their `type` is the adaptation family
(fine-tuned on all of SQuAD, few-shot fine-tuned, in-context learning, zero-shot); f1_lower
and f1_upper are read as the distances of their interval's bounds below and above F1.
"""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path

DATASETS = {"squad": "squad-dev", "squadshifts_new_wiki": "new-wiki", "squadshifts_nyt": "nyt",
            "squadshifts_reddit": "reddit", "squadshifts_amazon": "amazon"}
FAMILIES = {"finetuned": "fine-tuned", "fewshot": "few-shot fine-tuned",
            "icl": "in-context learning", "zeroshot": "zero-shot"}
COLUMNS = ("model", "family", "architecture", "testset", "metric", "value", "lo", "hi",
           "reference")


def convert(text: str) -> list[dict]:
    """Their table's rows on SQuAD and SQuADShifts, in this project's long form (F1 only:
    they publish no EM), in their order."""
    out = []
    for row in csv.DictReader(io.StringIO(text)):
        testset = DATASETS.get(row["dataset"])
        if testset is None:
            continue
        f1 = float(row["f1"])
        out.append({"model": row["model_name"], "family": FAMILIES[row["type"]],
                    "architecture": row["model_family"], "testset": testset, "metric": "f1",
                    "value": f"{f1:.4f}", "lo": f"{f1 - float(row['f1_lower']):.4f}",
                    "hi": f"{f1 + float(row['f1_upper']):.4f}",
                    "reference": "" if testset == "squad-dev" else "squad-dev"})
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m analysis.sources.awadalla THEIR_RESULTS.csv", file=sys.stderr)
        return 2
    writer = csv.DictWriter(sys.stdout, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(convert(Path(argv[0]).read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
