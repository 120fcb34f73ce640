"""Prompts for generative QA, and the rule that turns a generation into an answer.

A prompt is an optional instruction, then `shots` demonstrations, then the question, each
rendered from one template with two placeholders, `{context}` and `{question}`; a
demonstration is followed by its answer. Demonstrations are drawn, seeded, from a training
split (never from the test set): the same seed and split give the same prompts everywhere.

The answer is taken from the generated text by the extraction rule, before the official
scorer sees it:
- `first-line` (the default): cut at the first stop string (as an OpenAI-compatible server
  does), keep the first non-empty line, drop a leading "Answer:" label and quotes around the
  whole answer, strip spaces;
- `raw`: cut at the first stop string and strip spaces, nothing else.

This module imports nothing else of the project: it runs inside containers too.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

DEFAULT_TEMPLATE = "Context: {context}\nQuestion: {question}\nAnswer:"
PLACEHOLDER = re.compile(r"\{(\w+)\}")
EXTRACTION_RULES = ("first-line", "raw")
_LABEL = re.compile(r"^\s*answer\s*:\s*", re.IGNORECASE)
_QUOTES = {'"': '"', "'": "'", "\u201c": "\u201d", "\u2018": "\u2019"}


@dataclass(frozen=True)
class PromptSpec:
    """How a question becomes a prompt (bundle.yaml `prompt:`)."""

    template: str = DEFAULT_TEMPLATE
    shots: int = 0
    shots_from: str | None = None  # the training split demonstrations are drawn from
    seed: int = 0
    separator: str = "\n\n"
    instruction: str = ""

    def __post_init__(self) -> None:
        check_template(self.template)
        if self.shots < 0 or (self.shots and not self.shots_from):
            raise ValueError("prompt.shots needs prompt.shots_from, a training split")


@dataclass(frozen=True)
class GenerationSpec:
    """Decoding (bundle.yaml `generation:`): greedy, at most `max_new_tokens`, cut at the
    first of `stop`, then the extraction rule."""

    max_new_tokens: int = 32
    stop: tuple[str, ...] = ("\n",)
    extraction: str = "first-line"
    batch_size: int | None = None

    def __post_init__(self) -> None:
        if self.extraction not in EXTRACTION_RULES:
            raise ValueError(f"generation.extraction must be one of "
                             f"{', '.join(EXTRACTION_RULES)}, not {self.extraction!r}")
        if not 0 < self.max_new_tokens <= 1024:
            raise ValueError("generation.max_new_tokens must be between 1 and 1024")


@dataclass(frozen=True)
class Demonstration:
    context: str
    question: str
    answer: str


@dataclass
class Prompted:
    """One question of the answer-free input, with its prompt."""

    id: str
    prompt: str
    context: str = field(repr=False, default="")
    question: str = ""


def check_template(template: str) -> None:
    """A template names `{question}`, may name `{context}`, and nothing else."""
    names = set(PLACEHOLDER.findall(template))
    unknown = names - {"context", "question"}
    if unknown:
        raise ValueError(f"prompt.template names {', '.join(sorted(unknown))}; only "
                         f"{{context}} and {{question}} are filled in")
    if "question" not in names:
        raise ValueError("prompt.template must contain {question}")


def render(template: str, context: str, question: str) -> str:
    """The template with its two placeholders filled; braces in the text stay as they are."""
    values = {"context": context, "question": question}
    return PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), template)


def demonstrations(train: dict, shots: int, seed: int) -> list[Demonstration]:
    """`shots` questions of a SQuAD-format training split with their first answers, drawn
    with `seed` from the questions in id order (the file's order does not matter)."""
    if shots <= 0:
        return []
    pool = sorted(((qa["id"], paragraph["context"], qa["question"], qa["answers"][0]["text"])
                   for article in train["data"] for paragraph in article["paragraphs"]
                   for qa in paragraph["qas"] if qa.get("answers")), key=lambda t: t[0])
    if len(pool) < shots:
        raise ValueError(f"the training split has {len(pool)} answered questions, fewer "
                         f"than prompt.shots = {shots}")
    chosen = random.Random(seed).sample(pool, shots)
    return [Demonstration(context, question, answer) for _, context, question, answer in chosen]


def prompt_for(spec: PromptSpec, demos: list[Demonstration], context: str,
               question: str) -> str:
    parts = [spec.instruction] if spec.instruction else []
    parts += [f"{render(spec.template, d.context, d.question)} {d.answer}" for d in demos]
    parts.append(render(spec.template, context, question))
    return spec.separator.join(parts)


def prompts(document: dict, spec: PromptSpec, demos: list[Demonstration]) -> list[Prompted]:
    """A prompt per question of an answer-free SQuAD-format document, in file order."""
    return [Prompted(qa["id"], prompt_for(spec, demos, paragraph["context"], qa["question"]),
                     paragraph["context"], qa["question"])
            for article in document["data"] for paragraph in article["paragraphs"]
            for qa in paragraph["qas"]]


def cut_at_stop(text: str, stop: tuple[str, ...]) -> str:
    """The text before the first occurrence of any stop string, as an OpenAI-compatible
    server returns it (a generation that begins with a stop string is empty)."""
    end = min((i for i in (text.find(s) for s in stop if s) if i >= 0), default=len(text))
    return text[:end]


def extract(text: str, rule: str = "first-line", stop: tuple[str, ...] = ("\n",)) -> str:
    """The answer in a generation (see the module's docstring for the rules)."""
    cut = cut_at_stop(text, stop)
    if rule == "raw":
        return cut.strip()
    lines = [line for line in cut.splitlines() if line.strip()]
    answer = _LABEL.sub("", lines[0]).strip() if lines else ""
    if len(answer) >= 2 and _QUOTES.get(answer[0]) == answer[-1]:
        answer = answer[1:-1].strip()
    return answer


def generation_spec(config: dict) -> GenerationSpec:
    """The decoding settings of a generative program config (`generation`)."""
    generation = config["generation"]
    return GenerationSpec(**{**generation, "stop": tuple(generation.get("stop", ()))})


def prompted(document: dict, config: dict) -> list[Prompted]:
    """The prompts of a document's questions under a generative program config (`prompt`,
    `demonstrations`)."""
    demos = [Demonstration(**d) for d in config.get("demonstrations", [])]
    return prompts(document, PromptSpec(**config["prompt"]), demos)


def answers(texts: dict[str, str], spec: GenerationSpec) -> tuple[dict, dict]:
    """({id: answer}, {id: {"generation", "answer"}}) from each question's generated text,
    cut at the first stop string and put through the extraction rule."""
    out, kept = {}, {}
    for qid, text in texts.items():
        cut = cut_at_stop(text, spec.stop)
        out[qid] = extract(cut, spec.extraction, ())
        kept[qid] = {"generation": cut, "answer": out[qid]}
    return out, kept
