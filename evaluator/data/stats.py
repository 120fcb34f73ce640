"""What a test set holds, computed from its file: the SQuADShifts paper's Table 1 (articles,
questions), extended with paragraphs, lengths and answers per question. Lengths are in
whitespace-separated words, so they are comparable across sets and need no tokenizer."""

from __future__ import annotations

from dataclasses import asdict, dataclass

COLUMNS = ("articles", "paragraphs", "questions", "paragraph_words", "question_words",
           "answer_words", "answers_per_question")


@dataclass(frozen=True)
class Stats:
    """Counts, and means: words per paragraph, per question and per gold answer (every answer
    a question lists, repeats included), gold answers per question."""

    articles: int
    paragraphs: int
    questions: int
    paragraph_words: float
    question_words: float
    answer_words: float
    answers_per_question: float

    def row(self) -> dict:
        return asdict(self)


def _mean(total: int, count: int) -> float:
    return total / count if count else 0.0


def of(raw: dict) -> Stats:
    """Statistics of a SQuAD-format document (`{"data": [articles]}`)."""
    articles = raw["data"]
    paragraphs = [p for a in articles for p in a["paragraphs"]]
    qas = [qa for p in paragraphs for qa in p["qas"]]
    answers = [a["text"] for qa in qas for a in qa.get("answers", [])]
    return Stats(
        articles=len(articles), paragraphs=len(paragraphs), questions=len(qas),
        paragraph_words=_mean(sum(len(p["context"].split()) for p in paragraphs),
                              len(paragraphs)),
        question_words=_mean(sum(len(qa["question"].split()) for qa in qas), len(qas)),
        answer_words=_mean(sum(len(a.split()) for a in answers), len(answers)),
        answers_per_question=_mean(len(answers), len(qas)))
