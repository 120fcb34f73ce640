"""What a SQuAD v1.1 test-set file must hold, checked question by question.

The official evaluation script assumes every question has at least one gold answer (it takes
a maximum over them) and ids that are unique; an answer that is not where its
`answer_start` says is a sign of a broken file. `problems` lists what is wrong, each naming
the file, the article and the question, so a user's own set is fixed before anything is
scored with it.
"""

from __future__ import annotations

from pathlib import Path

MAX_LISTED = 20


def problems(raw: object, path: Path | str, *, expected: int | None = None,
             aligned: bool = True, content: bool = False) -> list[str]:
    """Every problem of a SQuAD-format document (at most MAX_LISTED are spelled out, then a
    count); `aligned`: each answer text must stand at its answer_start in the context;
    `content` (`qashift validate` of a folder's own or fetched data): no gold answer and no
    context is empty, each named once."""
    out: list[str] = []
    seen: set[str] = set()
    count = 0

    def say(where: str, what: str) -> None:
        out.append(f"{path}: {where}: {what}")

    if not isinstance(raw, dict) or not isinstance(raw.get("data"), list):
        return [f"{path}: not a SQuAD-format file (no top-level \"data\" list)"]
    for a_index, article in enumerate(raw["data"]):
        title = article.get("title", f"article {a_index}") if isinstance(article, dict) else "?"
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        if not isinstance(paragraphs, list):
            say(f"article {title!r}", "not a SQuAD-format file (no \"paragraphs\" list)")
            continue
        for paragraph in paragraphs:
            context = paragraph.get("context") if isinstance(paragraph, dict) else None
            qas = paragraph.get("qas") if isinstance(paragraph, dict) else None
            if not isinstance(context, str) or not isinstance(qas, list):
                say(f"article {title!r}", "not a SQuAD-format file (a paragraph without a "
                                          "\"context\" text or \"qas\" list)")
                continue
            first = qas[0].get("id") if qas and isinstance(qas[0], dict) else None
            blank = content and not context.strip()
            if blank:  # once for the paragraph, not once for each of its answers
                say(f"article {title!r}, the paragraph of question {first!r}",
                    f"has an empty context ({len(qas)} questions on it)")
            for qa in qas:
                count += 1
                qid = qa.get("id") if isinstance(qa, dict) else None
                where = f"article {title!r}, question {qid!r}"
                if not isinstance(qid, str) or not qid:
                    say(where, "has no id")
                    continue
                if qid in seen:
                    say(where, "repeats an id")
                seen.add(qid)
                if not isinstance(qa.get("question"), str):
                    say(where, "has no question text")
                answers = qa.get("answers")
                if not isinstance(answers, list) or not answers:
                    say(where, "has no gold answer (the official script needs at least one)")
                    continue
                for answer in answers:
                    text = answer.get("text") if isinstance(answer, dict) else None
                    start = answer.get("answer_start") if isinstance(answer, dict) else None
                    if not isinstance(text, str):
                        say(where, "has an answer without a text")
                    elif content and not text.strip():
                        say(where, "has an empty gold answer (any answer would match it "
                                   "in part, an empty one exactly)")
                    elif aligned and not blank and (not isinstance(start, int) or
                                      context[start:start + len(text)] != text):
                        say(where, f"answer {text[:40]!r} is not at its answer_start "
                                   f"{start!r} in the context")
    if expected is not None and count != expected:
        out.append(f"{path}: holds {count} questions, testset.yaml says questions: {expected}")
    if len(out) > MAX_LISTED:
        out = out[:MAX_LISTED] + [f"{path}: ... and {len(out) - MAX_LISTED} more problems"]
    return out
