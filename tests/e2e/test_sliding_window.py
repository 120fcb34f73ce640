"""The sliding-window baseline submission, run exactly as the runners run it: a subprocess."""

from __future__ import annotations

import json
import os
import re
import string
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SUBMISSION = REPO / "submissions" / "sliding-window"
PROGRAM = SUBMISSION / "sliding_window.py"


def run_program(
    inp: Path, out: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(PROGRAM), str(inp), str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        cwd=SUBMISSION,
    )


def squad(paragraphs: list[tuple[str, list[tuple[str, str]]]], title: str = "t") -> dict:
    """A SQuAD-format document without answers: [(context, [(id, question)])]."""
    return {
        "version": "1.1",
        "data": [
            {
                "title": title,
                "paragraphs": [
                    {"context": c, "qas": [{"id": i, "question": q} for i, q in qas]}
                    for c, qas in paragraphs
                ],
            }
        ],
    }


SAMPLE = squad(
    [
        (
            "Paris is the capital of France. Berlin is the capital of Germany. "
            "The Eiffel Tower opened in 1889. It was designed by Gustave Eiffel's company.",
            [
                ("q-capital", "What is the capital of France?"),
                ("q-year", "In which year was the Eiffel Tower opened?"),
                ("q-designer", "Whose company designed the tower?"),
                ("q-nothing", "Zebras quantum xylophone?"),
            ],
        ),
        (
            "Super Bowl 50 was played on February 7, 2016, at Levi's Stadium in Santa Clara, "
            "California. The Denver Broncos defeated the Carolina Panthers 24–10.",
            [
                ("q-where", "Where was Super Bowl 50 played?"),
                ("q-who", "Which team defeated the Carolina Panthers?"),
                ("q-score", "What was the final score?"),
            ],
        ),
        # Unicode, newlines, no sentence punctuation, and degenerate contexts.
        (
            "Zürich liegt am Zürichsee\nand the café “Odéon” opened there in 1911",
            [("q-unicode", "When did the café Odéon open?")],
        ),
        ("...", [("q-punct-only", "What is this?")]),
        ("", [("q-empty", "What is here?")]),
        ("the of and", [("q-stop-only", "What?")]),
    ]
)


def all_questions(doc: dict) -> dict[str, str]:
    return {qa["id"]: p["context"] for a in doc["data"] for p in a["paragraphs"] for qa in p["qas"]}


@pytest.fixture
def sample_run(tmp_path: Path) -> dict[str, str]:
    inp, out = tmp_path / "in.json", tmp_path / "out.json"
    inp.write_text(json.dumps(SAMPLE), encoding="utf-8")
    proc = run_program(inp, out)
    assert proc.returncode == 0, proc.stderr
    assert "sliding-window" in proc.stderr  # progress goes to stderr
    assert proc.stdout == ""
    return json.loads(out.read_text(encoding="utf-8"))


def test_every_question_answered_with_a_substring_of_its_context(sample_run):
    contexts = all_questions(SAMPLE)
    assert set(sample_run) == set(contexts)
    for qid, ans in sample_run.items():
        assert isinstance(ans, str)
        assert ans in contexts[qid], (qid, ans)
        assert ans == ans.strip()


def test_obvious_answers_from_overlap(sample_run):
    assert sample_run["q-capital"] == "Paris"
    assert sample_run["q-year"] == "1889"
    assert sample_run["q-who"] == "Denver Broncos"


def test_answers_are_nonempty_when_the_context_has_words(sample_run):
    for qid in ("q-capital", "q-year", "q-designer", "q-nothing", "q-where", "q-unicode"):
        assert sample_run[qid].strip(), qid
    assert sample_run["q-empty"] == ""


def test_deterministic_byte_identical_output(tmp_path: Path):
    inp = tmp_path / "in.json"
    inp.write_text(json.dumps(SAMPLE), encoding="utf-8")
    outputs = []
    for k, seed in enumerate(["0", "1", "random"]):
        out = tmp_path / f"out{k}.json"
        proc = run_program(inp, out, env={"PYTHONHASHSEED": seed})
        assert proc.returncode == 0, proc.stderr
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1] == outputs[2]


def test_ignores_answers_in_the_input(tmp_path: Path):
    """Gold (or misleading) answers in the input must not change a single prediction."""
    with_answers = json.loads(json.dumps(SAMPLE))
    for article in with_answers["data"]:
        for para in article["paragraphs"]:
            for qa in para["qas"]:
                ctx = para["context"]
                qa["answers"] = [{"text": ctx[-5:], "answer_start": max(0, len(ctx) - 5)}]
                qa["is_impossible"] = False
    a_in, b_in = tmp_path / "plain.json", tmp_path / "answers.json"
    a_in.write_text(json.dumps(SAMPLE), encoding="utf-8")
    b_in.write_text(json.dumps(with_answers), encoding="utf-8")
    a_out, b_out = tmp_path / "a.json", tmp_path / "b.json"
    assert run_program(a_in, a_out).returncode == 0
    assert run_program(b_in, b_out).returncode == 0
    assert a_out.read_bytes() == b_out.read_bytes()


def test_never_mentions_answers_in_the_source():
    source = PROGRAM.read_text(encoding="utf-8")
    assert '"answers"' not in source and "'answers'" not in source


def test_uses_only_the_standard_library():
    imports = re.findall(r"^(?:from|import) (\w+)", PROGRAM.read_text(encoding="utf-8"), re.M)
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    assert set(imports) <= stdlib, set(imports) - stdlib


@pytest.mark.parametrize(
    "content, fragment",
    [
        ("{not json", "not valid JSON"),
        ('{"version": "1.1"}', "'data'"),
        ('{"data": [{"title": "x"}]}', "paragraphs"),
        ('{"data": [{"paragraphs": [{"qas": []}]}]}', "context"),
        ('{"data": [{"paragraphs": [{"context": "c", "qas": [{"id": "1"}]}]}]}', "question"),
        ('["a list"]', "'data'"),
    ],
)
def test_malformed_input_exits_nonzero_with_a_clear_message(tmp_path, content, fragment):
    inp, out = tmp_path / "bad.json", tmp_path / "out.json"
    inp.write_text(content, encoding="utf-8")
    proc = run_program(inp, out)
    assert proc.returncode != 0
    assert "error" in proc.stderr and fragment in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists()


def test_missing_and_non_utf8_input(tmp_path: Path):
    proc = run_program(tmp_path / "nope.json", tmp_path / "out.json")
    assert proc.returncode != 0 and "cannot read input" in proc.stderr
    assert "Traceback" not in proc.stderr
    bad = tmp_path / "latin1.json"
    bad.write_bytes('{"data": "caf\u00e9"}'.encode("latin-1"))
    proc = run_program(bad, tmp_path / "out.json")
    assert proc.returncode != 0 and "UTF-8" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_wrong_arguments_print_usage(tmp_path: Path):
    proc = subprocess.run(
        [sys.executable, str(PROGRAM), str(tmp_path / "only-one")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "usage" in proc.stderr


def test_bundle_declares_the_command():
    text = (SUBMISSION / "bundle.yaml").read_text(encoding="utf-8")
    assert "id: sliding-window" in text
    assert "command: python3 sliding_window.py {input} {output}" in text


def _normalize(s: str) -> str:
    s = "".join(ch for ch in s.lower() if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


@pytest.mark.slow
def test_squad_dev_full_run_is_fast_and_sane(tmp_path: Path, shared_data: Path):
    doc = json.loads((shared_data / "squad-v1.1" / "dev-v1.1.json").read_text(encoding="utf-8"))
    gold: dict[str, list[str]] = {}
    contexts: dict[str, str] = {}
    for article in doc["data"]:
        for para in article["paragraphs"]:
            for qa in para["qas"]:
                gold[qa["id"]] = [a["text"] for a in qa.pop("answers")]
                contexts[qa["id"]] = para["context"]
    inp, out = tmp_path / "dev.json", tmp_path / "pred.json"
    inp.write_text(json.dumps(doc), encoding="utf-8")
    t0 = time.monotonic()
    proc = run_program(inp, out)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    assert elapsed < 60, elapsed  # about 4 s of CPU on one core when measured
    preds = json.loads(out.read_text(encoding="utf-8"))
    assert set(preds) == set(gold) and len(preds) == 10570
    assert all(preds[q] in contexts[q] for q in preds)
    em = sum(any(_normalize(preds[q]) == _normalize(g) for g in gold[q]) for q in gold)
    # Measured: EM 9.66 (F1 22.98). The SQuAD paper reports about 13 EM / 20 F1.
    assert 0.07 < em / len(gold) < 0.2
