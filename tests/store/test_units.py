"""The gold that rows from elsewhere are scored again on: each test set loaded once when the
rows come in test-set order, and never more than a few sets held at once."""

from __future__ import annotations

from evaluator.data import testsets
from evaluator.store.units import Gold
from tests.conftest import write_testset


def test_gold_loads_each_set_once_in_testset_order_and_holds_at_most_keep(monkeypatch):
    loads = []
    monkeypatch.setattr(Gold, "_load", lambda self, testset, sha: loads.append(testset) or
                        f"test set {testset} is not here")
    rows = [{"testset": t, "testset_sha256": "0" * 64, "options": "{}"} for t in "cabcabca"]
    gold = Gold()
    for row in sorted(rows, key=Gold.by_testset):
        assert gold.dataset(row) == f"test set {row['testset']} is not here"
        assert len(gold._sets) <= Gold.KEEP
    assert loads == ["a", "b", "c"]
    for row in rows:  # out of order: still right, loaded again once evicted
        assert gold.dataset(row) == f"test set {row['testset']} is not here"
    assert len(gold._sets) == Gold.KEEP


def test_gold_keeps_nothing_in_the_process_wide_cache_of_test_sets(tmp_path, small_dev,
                                                                   monkeypatch):
    """What Gold evicts is gone: the sets it loads are not also kept by `TestSet.load`."""
    write_testset(tmp_path, "tiny", small_dev)
    monkeypatch.setenv("QASHIFT_TESTSETS", str(tmp_path))
    tiny = testsets.get("tiny")
    before = testsets._load_dataset.cache_info().currsize
    scorer, dataset = Gold().dataset({"testset": "tiny", "testset_sha256": tiny.sha256,
                                      "options": "{}"})
    assert (scorer, len(dataset.questions)) == ("squad-v1.1", tiny.questions)
    assert testsets._load_dataset.cache_info().currsize == before
