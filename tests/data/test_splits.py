"""Train/test splits of a test set: deterministic, disjoint, covering their parent, with their
own sha256; squad-dev's halves are exactly the held-out half and its complement."""

from __future__ import annotations

import pytest

from evaluator.data import testsets
from evaluator.data.derive.splits import split_groups

PAIRS = [("squad-dev-train", "squad-dev-heldout", "squad-dev"),
         ("new-wiki-train", "new-wiki-test", "new-wiki"),
         ("reddit-train", "reddit-test", "reddit"),
         ("amazon-train", "amazon-test", "amazon")]


def _ids(dataset) -> set[str]:
    return {q.id for q in dataset.questions}


@pytest.mark.parametrize("train, test, parent", PAIRS)
def test_halves_are_disjoint_and_cover_their_parent(train, test, parent, workspace):
    train_set, test_set, whole = (testsets.get(n) for n in (train, test, parent))
    a, b, c = train_set.load(), test_set.load(), whole.load()
    assert _ids(a) & _ids(b) == set()
    assert _ids(a) | _ids(b) == _ids(c)
    assert test_set.train == train and train_set.kind == "training"
    assert len({train_set.sha256, test_set.sha256, whole.sha256}) == 3


@pytest.mark.parametrize("extra", ["new-wiki", "reddit", "amazon"])
def test_a_split_with_extra_data_is_both_parents_in_order(extra, workspace):
    plus = testsets.get(f"squad-dev-train-plus-{extra}")
    base, more = testsets.get("squad-dev-train").load(), testsets.get(f"{extra}-train").load()
    joined = plus.load()
    assert [q.id for q in joined.questions] == [q.id for q in (*base.questions,
                                                                 *more.questions)]
    assert plus.derive.parents == ("squad-dev-train", f"{extra}-train")
    assert plus.kind == "training" and plus.reference == "squad-dev-train"
    provenance = plus.derived().provenance
    assert provenance["parents"] == ["squad-dev-train", f"{extra}-train"]
    assert provenance["parent_sha256"] not in (base.sha256, more.sha256)  # both enter the key


def test_a_split_is_a_function_of_the_data_alone(dev_raw):
    assert split_groups(dev_raw, "article") == split_groups(dev_raw, "article")
    train, test = split_groups(dev_raw, "article")
    assert len(train["data"]) == len(test["data"]) == 24
    with pytest.raises(ValueError, match="unit must be article or paragraph"):
        split_groups(dev_raw, "sentence")


def test_training_splits_are_not_part_of_all_but_can_be_named():
    every = {t.id for t in testsets.resolve(["all"])}
    assert "squad-dev-train" not in every and "reddit-test" in every
    assert [t.id for t in testsets.resolve(["squad-dev-train"])] == ["squad-dev-train"]


def test_the_real_squad_train_file_is_declared_and_a_clear_error_offline(workspace,
                                                                        monkeypatch, tmp_path):
    from evaluator.core.errors import DataError

    squad_train = testsets.get("squad-train")
    assert squad_train.sha256 == \
        "3527663986b8295af4f7fcdff1ba1ff3f72d07d61a20f487cb238a6ef92fd955"
    monkeypatch.setenv("QASHIFT_DATA_DIR", str(tmp_path))  # a mirror without it
    with pytest.raises(DataError, match="train-v1.1.json"):
        squad_train.load()
