"""The bAbI-style generator: eleven tasks, each answer an exact span of a supporting fact (its
plural where only the plural is there, as Liu et al.'s Figure 9 example), exact part sizes,
training and test parts that never share an example, the same bytes from the same seed."""

from __future__ import annotations

import random
import re

import pytest

from evaluator.data import testsets
from evaluator.data.derive import babi


def test_liu_et_als_figure_9_example_converts_to_the_plural_span():
    story = ("Mice are afraid of cats.", "Gertrude is a mouse.", "Emily is a mouse.",
             "Wolves are afraid of sheep.", "Winona is a wolf.", "Jessica is a mouse.",
             "Cats are afraid of sheep.", "Sheep are afraid of cats.")
    example = babi.Example(story, "What is jessica afraid of?", "cat", (0, 5))
    passage, start, text = babi.to_span(example)
    assert text == "cats" and passage[start:start + len(text)] == "cats"
    assert passage.index("cats") == start  # the first occurrence, in the supporting fact


def test_an_answer_in_no_supporting_fact_is_refused():
    with pytest.raises(ValueError, match="in no supporting fact"):
        babi.to_span(babi.Example(("Mary went to the kitchen.",), "Where is Mary?", "garden",
                                  (0,)))


@pytest.mark.parametrize("task", babi.TASKS)
def test_every_task_gives_exact_spans_in_its_supporting_facts(task):
    trains, tests = babi.parts(task, 300, 100, random.Random(task))
    assert (len(trains), len(tests)) == (300, 100)
    test_keys = {(e.sentences, e.question) for e in tests}
    assert len(test_keys) == 100  # distinct
    assert not test_keys & {(e.sentences, e.question) for e in trains}
    for example in trains + tests:
        passage, start, text = babi.to_span(example)
        assert passage[start:start + len(text)] == text
        assert text.lower() in (example.answer.lower(), babi.plural(example.answer).lower())
        support = " ".join(example.sentences[k] for k in example.support)
        assert re.search(rf"\b{re.escape(text)}\b", support)


def test_the_single_supporting_fact_answer_is_the_persons_last_place():
    for example in babi.parts(1, 200, 0, random.Random(5))[0]:
        who = example.question.removeprefix("Where is ").rstrip("?")
        moves = [s for s in example.sentences if s.startswith(who + " ")]
        assert moves[-1].endswith(f" the {example.answer}.")


def test_the_time_reasoning_answer_follows_the_order_of_the_day():
    order = {t: k for k, t in enumerate(babi.TIMES)}
    for example in babi.parts(14, 200, 0, random.Random(6))[0]:
        when = {s.split(" went to the ")[1].rstrip("."): order[s.split(" ")[0] if
                s.startswith("Yesterday") else " ".join(s.split(" ")[:2])]
                for s in example.sentences}
        spot = example.question.split(" the ")[-1].rstrip("?")
        step = -1 if " before " in example.question else 1
        assert when[example.answer] == when[spot] + step


def test_the_folders_have_the_official_sizes_and_the_same_bytes_from_the_same_seed():
    test, train = testsets.get("babi-15"), testsets.get("babi-15-train")
    assert test.train == "babi-15-train" and train.kind == "training"
    a, b = test.load(), train.load()
    assert (len(a.questions), len(b.questions)) == (1000, 900)
    assert babi.babi(None, {"task": 15, "part": "test", "train": 900, "test": 1000},
                     random.Random(0))[0] == a.raw
    assert testsets.get("babi-3-9k").questions == 1000
    assert testsets.get("babi-3-9k-train").questions == 9000


def test_a_bad_task_or_part_is_refused():
    with pytest.raises(ValueError, match="one of 1, 2, 3"):
        babi.parts(6, 1, 1, random.Random(0))
    with pytest.raises(ValueError, match="part must be train or test"):
        babi.babi(None, {"task": 1, "part": "dev"}, random.Random(0))
