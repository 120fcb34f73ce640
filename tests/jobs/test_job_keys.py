"""A job key is the identity of a stored result: refactoring must never change it.

The keys below were stored by an earlier layout of the package; a stored result must still be
found as cached. Editing one of these bundle folders or the squad-dev data changes its key on
purpose (it is a different submission or test set): then, and only then, update the pin.
"""

from __future__ import annotations

import pytest

from evaluator.bundles import spec as bundles
from evaluator.data import testsets
from evaluator.jobs.job import Job

STORED_KEYS = {
    "bert-ensemble": "b39a380e5b990b0cb8b066077637d90e57d7340dac3d97a02912d4c1d46bbc53",
    "match-lstm-ensemble": "50a6e632b488d447b313c049797bc308d169519f7dd5deff6e9dbc333f6a8fd5",
    "r-net-plus-ensemble": "4127bbac750c9226ed69936e19996c053be0e08b5bfaea1e0a11d2b2fc3cc952",
    "slqa-plus-ensemble": "ae861c82ef00d702562259c0e07a23421f716c2e2524491a09101f9d5f52318e",
    "logistic-regression": "e863d66c750ce6a6e27eb77bf3d3c095b72162435015e45175de8baaebe042f0",
}


@pytest.mark.parametrize("bundle_id", sorted(STORED_KEYS))
def test_the_stored_prediction_bundles_keep_their_keys(bundle_id):
    job = Job(bundles.get(bundle_id), testsets.get("squad-dev"))
    assert job.key == STORED_KEYS[bundle_id]


def test_options_change_the_key():
    plain = Job(bundles.get("bert-ensemble"), testsets.get("squad-dev"))
    other = Job(bundles.get("bert-ensemble"), testsets.get("squad-dev"), {"limit": 500})
    assert plain.key != other.key
