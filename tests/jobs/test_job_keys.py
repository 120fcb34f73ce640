"""A job key is the identity of a stored result: refactoring must never change it.

The keys below were stored by earlier layouts of the package; a stored result must still be
found as cached. Editing one of these bundle folders or the squad-dev data changes its key on
purpose (it is a different submission or test set): then, and only then, update the pin.
Stores made before the test set's id was part of keys (`NAME_FREE_KEYS`) are rekeyed when
opened, so those keys must still be what `name_free_key` gives.
"""

from __future__ import annotations

import pytest

from evaluator.bundles import spec as bundles
from evaluator.data import testsets
from evaluator.jobs.job import Job, name_free_key

STORED_KEYS = {
    "bert-ensemble": "da51fda85ca83eba381b9194fd528f814530ccd933f8c6c9e3419b8c682f007b",
    "match-lstm-ensemble": "e2efbf953dc13540fef7e21364b1f5cad2e4008b075586f4fe03380b83779e69",
    "r-net-plus-ensemble": "edf2b80ba790f9a7b4e6b09d944539be6977e52b373f2e65a4a7e7ef5eb4a135",
    "slqa-plus-ensemble": "b07750f9aedba57c39c7a6934c64c85a67cbc1898b1b2a2b3a2eadbaf1f31c0b",
    "logistic-regression": "61163963511d189c60bf1fb1319b39ef691af8c45f96a119c91d3fb5b9a4ca52",
}
NAME_FREE_KEYS = {
    "bert-ensemble": "b39a380e5b990b0cb8b066077637d90e57d7340dac3d97a02912d4c1d46bbc53",
    "match-lstm-ensemble": "50a6e632b488d447b313c049797bc308d169519f7dd5deff6e9dbc333f6a8fd5",
    "r-net-plus-ensemble": "4127bbac750c9226ed69936e19996c053be0e08b5bfaea1e0a11d2b2fc3cc952",
    "slqa-plus-ensemble": "ae861c82ef00d702562259c0e07a23421f716c2e2524491a09101f9d5f52318e",
    "logistic-regression": "e863d66c750ce6a6e27eb77bf3d3c095b72162435015e45175de8baaebe042f0",
}


@pytest.mark.parametrize("bundle_id", sorted(NAME_FREE_KEYS))
def test_the_keys_of_stores_made_before_ids_were_in_keys_are_still_recognised(bundle_id):
    job = Job(bundles.get(bundle_id), testsets.get("squad-dev"))
    assert name_free_key(job.bundle.digest, job.testset.sha256, job.scorer_version,
                         job.options) == NAME_FREE_KEYS[bundle_id]


@pytest.mark.parametrize("bundle_id", sorted(STORED_KEYS))
def test_the_stored_prediction_bundles_keep_their_keys(bundle_id):
    job = Job(bundles.get(bundle_id), testsets.get("squad-dev"))
    assert job.key == STORED_KEYS[bundle_id]


def test_options_change_the_key():
    plain = Job(bundles.get("bert-ensemble"), testsets.get("squad-dev"))
    other = Job(bundles.get("bert-ensemble"), testsets.get("squad-dev"), {"limit": 500})
    assert plain.key != other.key
