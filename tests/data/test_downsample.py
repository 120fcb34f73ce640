"""Downsampled training splits (Liu et al.'s downsampled SQuAD): exact sizes, questions of the
parent only, the same questions as a study's train size with the same seed; the test set
they are evaluated on is the full held-out half, unchanged."""

from __future__ import annotations

import random

import pytest

from evaluator.core.errors import UserError
from evaluator.data import testsets
from evaluator.data.derive.splits import downsample, sample_questions
from evaluator.training.job import downsample as train_size_sample


def ids(raw: dict) -> list[str]:
    return [qa["id"] for a in raw["data"] for p in a["paragraphs"] for qa in p["qas"]]


@pytest.mark.parametrize("n", [500, 1000, 2500])
def test_each_folder_has_exactly_its_size_from_its_parent(workspace, n):
    folder, parent = testsets.get(f"squad-dev-train-{n}"), testsets.get("squad-dev-train")
    assert folder.kind == "training" and folder.derive.parent == "squad-dev-train"
    raw, full = folder.load().raw, parent.load().raw
    chosen = ids(raw)
    assert len(chosen) == len(set(chosen)) == n
    assert set(chosen) <= set(ids(full))
    assert [i for i in ids(full) if i in set(chosen)] == chosen  # file order kept
    assert chosen == ids(train_size_sample(full, n, 0))


def test_the_transform_refuses_a_bad_size(dev_raw):
    with pytest.raises(ValueError, match="positive"):
        downsample(dev_raw, {"questions": 0}, random.Random(0))
    with pytest.raises(UserError, match="more than the split's"):
        sample_questions(dev_raw, 10**6, random.Random(0))
