"""Prompts and answer extraction for generative bundles (evaluator.qa.prompting)."""

from __future__ import annotations

import pytest

from evaluator.qa import prompting

TRAIN = {"data": [{"paragraphs": [
    {"context": f"Context {i}.", "qas": [{"id": f"q{i:02d}", "question": f"Question {i}?",
                                          "answers": [{"text": f"answer {i}",
                                                       "answer_start": 0}]}]}
    for i in range(20)]}]}


def test_a_template_names_the_question_and_nothing_unknown():
    with pytest.raises(ValueError, match="must contain"):
        prompting.PromptSpec(template="{context}")
    with pytest.raises(ValueError, match="passage"):
        prompting.PromptSpec(template="{passage} {question}")
    with pytest.raises(ValueError, match="shots_from"):
        prompting.PromptSpec(shots=2)


def test_braces_in_the_text_stay_as_they_are():
    text = prompting.render("Q: {question} C: {context}", "f(x) = {x}", "what is {y}?")
    assert text == "Q: what is {y}? C: f(x) = {x}"


def test_demonstrations_are_seeded_and_do_not_depend_on_file_order():
    first = prompting.demonstrations(TRAIN, 3, seed=7)
    shuffled = {"data": [{"paragraphs": list(reversed(TRAIN["data"][0]["paragraphs"]))}]}
    assert prompting.demonstrations(shuffled, 3, seed=7) == first
    assert prompting.demonstrations(TRAIN, 3, seed=8) != first
    assert len({d.question for d in first}) == 3
    with pytest.raises(ValueError, match="fewer than"):
        prompting.demonstrations(TRAIN, 21, seed=0)


def test_a_few_shot_prompt_puts_answered_demonstrations_before_the_question():
    spec = prompting.PromptSpec(shots=2, shots_from="train", seed=1, instruction="Answer.")
    demos = prompting.demonstrations(TRAIN, 2, seed=1)
    doc = {"data": [{"paragraphs": [{"context": "Paris is in France.",
                                     "qas": [{"id": "t1", "question": "Where is Paris?"}]}]}]}
    [item] = prompting.prompts(doc, spec, demos)
    parts = item.prompt.split("\n\n")
    assert parts[0] == "Answer." and len(parts) == 4
    assert parts[1].endswith(f"Answer: {demos[0].answer}")
    assert parts[3] == "Context: Paris is in France.\nQuestion: Where is Paris?\nAnswer:"


@pytest.mark.parametrize("generated, rule, stop, answer", [
    (" Denver Broncos\nQuestion: next", "first-line", ("\n",), "Denver Broncos"),
    ("\nDenver", "first-line", ("\n",), ""),  # a server stops at once on a leading stop
    ("\n\n Answer: \"Denver\" \n more", "first-line", (), "Denver"),
    ("  Denver.  ###  rest", "first-line", ("###",), "Denver."),
    ("  Denver\nBroncos ### x", "raw", ("###",), "Denver\nBroncos"),
    ("", "first-line", ("\n",), ""),
])
def test_the_extraction_rule(generated, rule, stop, answer):
    assert prompting.extract(generated, rule, stop) == answer


def test_decoding_settings_are_checked():
    with pytest.raises(ValueError, match="extraction"):
        prompting.GenerationSpec(extraction="json")
    with pytest.raises(ValueError, match="max_new_tokens"):
        prompting.GenerationSpec(max_new_tokens=0)
