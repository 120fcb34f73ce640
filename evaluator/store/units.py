"""The stored per-question scores of a cell ("units"): one object per result row, written by
the pipeline and read by every report that rescores or splits a cell.

A row that comes from elsewhere (`store import`) or from a rebuilt index (`store repair`) is
checked here twice: its EM, F1 and n must be what its per-question scores give
(`scores_problem`, which refuses a scores object larger than its n allows before parsing it),
and, where this machine holds the test set, its predictions must score as stated on this
machine's gold (`Gold.problem`). Neither proves which bundle wrote the predictions.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from evaluator import scoring
from evaluator.core.errors import RunFailure, UserError
from evaluator.core.gate import Refused
from evaluator.core.hashing import canonical_json, sha256_bytes
from evaluator.data import testsets
from evaluator.data.testsets import Dataset
from evaluator.scoring.predictions import load_predictions
from evaluator.scoring.squad_v1 import Scores, Unit, score
from evaluator.store.store import Store

# Bytes a scores object may hold per scored unit, and in all besides. Stored objects hold 60
# to 66 bytes a unit (a whole population's store, 106 rows); a unit of every test set in the
# data mirror and the derived-set cache, with the longest f1 text, takes at most 123 (98.5 on
# average over a set), so 1 KiB is eight times the longest unit. Parsing JSON costs up to ~27
# times its bytes, so the cap bounds what a forged object can cost.
UNIT_BYTES = 1024
SCORES_OVERHEAD = 4096
UNCHECKED = "cannot check:"  # how a reason starts when the row could not be re-scored here


def units_bytes(scorer_version: str, units: Sequence[Unit]) -> bytes:
    """`{"scorer": version, "units": [[id, em, f1, paragraph, article, missing], ...]}`."""
    rows = [[u.id, u.em, u.f1, u.paragraph, u.article, u.missing] for u in units]
    return canonical_json({"scorer": scorer_version, "units": rows})


def load_units(store: Store, row: dict) -> list[Unit]:
    """The per-question scores of a stored result row, verified by their sha256."""
    data = store.get_object(row["scores_sha256"])
    if data is None:
        raise RunFailure("malformed-predictions", f"stored per-question scores of "
                         f"{row['bundle']} x {row['testset']} are missing or corrupt; "
                         f"re-run with --rerun")
    return [Unit(*u) for u in json.loads(data)["units"]]


def scores_cap(n: int) -> int:
    """The most bytes the per-question scores object of a row of `n` units may hold."""
    return SCORES_OVERHEAD + UNIT_BYTES * max(int(n), 0)


def scores_problem(row: dict, data: bytes | None) -> str:
    """Why a result row's EM, F1 and n are not what its per-question scores object gives;
    "" when they are."""
    if data is None:
        return "its per-question scores are missing or corrupt"
    if len(data) > scores_cap(row["n"]):
        return (f"its per-question scores object holds {len(data):,} bytes, over the "
                f"{scores_cap(row['n']):,} allowed for n = {row['n']:,}")
    try:
        doc = json.loads(data)
        units = [Unit(*u) for u in doc["units"]]
        scores = Scores(str(doc["scorer"]), tuple(units), len(units), 0, 0)
        em, f1 = scores.em, scores.f1
    except (ValueError, TypeError, KeyError, RecursionError):
        return "its per-question scores cannot be read"
    if len(units) != row["n"]:
        return f"n is {row['n']} but its per-question scores hold {len(units)}"
    if abs(em - row["em"]) > 1e-9 or abs(f1 - row["f1"]) > 1e-9:
        return (f"its EM/F1 {row['em']:.3f}/{row['f1']:.3f} are not the {em:.3f}/{f1:.3f} "
                f"its per-question scores give")
    return ""


class Gold:
    """This machine's gold answers, loaded once per test set, that a result row from
    elsewhere is re-scored against exactly as a cell scores its predictions: the test set
    registered here under the row's id whose sha256 today is the row's, its `--limit` sample
    where the row's options ask for one, scored by evaluator/scoring with the test set's
    scorer. It holds the last KEEP sets it loaded: rows taken in test-set order (`by_testset`)
    load each set once, and a store of a hundred sets is checked in the memory of two."""

    KEEP = 2

    def __init__(self) -> None:
        self._sets: dict[tuple[str, str], tuple[str, Dataset] | str] = {}

    @staticmethod
    def by_testset(row: dict) -> tuple[str, str]:
        """A sort key that takes rows of one test set together (any row, well-formed or not)."""
        return str(row.get("testset")), str(row.get("testset_sha256"))

    def dataset(self, row: dict) -> tuple[str, Dataset] | str:
        """The scorer and the questions of the row's cell here, or why they are not here."""
        cell = (row["testset"], row["testset_sha256"])
        found = self._sets.pop(cell, None)
        if found is None:
            found = self._load(*cell)
        self._sets[cell] = found  # the newest last; the oldest goes past KEEP
        while len(self._sets) > self.KEEP:
            del self._sets[next(iter(self._sets))]
        if isinstance(found, str):
            return found
        scorer, dataset = found
        options = json.loads(row["options"])
        if "limit" not in options:
            return found
        try:
            return scorer, dataset.limited(int(options["limit"]), int(options.get("seed", 0)))
        except (TypeError, ValueError, OverflowError):
            return f"its options {row['options'][:60]!r} name no sample of the test set"

    def _load(self, testset_id: str, sha256: str) -> tuple[str, Dataset] | str:
        missing = f"{UNCHECKED} test set {testset_id} (sha256 {sha256[:12]}) is not here"
        try:
            testset = testsets.get(testset_id)
            if testset.sha256 != sha256:
                return missing
            return testset.scorer, testset.load(keep=False)
        except UserError:
            return missing

    def problem(self, row: dict, predictions: Path, scores: bytes | None) -> str:
        """Why the row's predictions (the object at `predictions`) do not score as its n,
        missing, EM/F1 and per-question scores (`scores`, the object's bytes) say on this
        machine's gold; "" when they do. A row whose test set, scorer or scorer version is not
        this machine's cannot be checked, and that is a reason too."""
        found = self.dataset(row)
        if isinstance(found, str):
            return found
        scorer, dataset = found
        if row["scorer"] != scorer or row["scorer_version"] != scoring.version(scorer):
            return (f"{UNCHECKED} it was scored by {row['scorer_version'][:40]!r}; test set "
                    f"{row['testset']} is scored by {scoring.version(scorer)!r} here")
        whole = self._sets[(row["testset"], row["testset_sha256"])][1]  # a sample's file may
        try:  # hold the whole set: the values it may hold are counted for the whole set
            answers = load_predictions(predictions, len(whole.questions))
        except (RunFailure, Refused) as exc:
            return f"its predictions cannot be read: {str(exc).splitlines()[0][:200]}"
        rescored = score(dataset.questions, answers, scorer)
        stated = (row["n"], row["questions"], row["missing"], row["extra"])
        counted = (rescored.n, rescored.questions, rescored.missing, rescored.extra)
        if stated != counted:
            return (f"its n/questions/missing/extra {'/'.join(map(str, stated))} are not the "
                    f"{'/'.join(map(str, counted))} its predictions give on this machine's gold")
        if why := scores_problem(row, scores):
            return why
        if abs(rescored.em - row["em"]) > 1e-9 or abs(rescored.f1 - row["f1"]) > 1e-9:
            return (f"its EM/F1 {row['em']:.3f}/{row['f1']:.3f} are not the "
                    f"{rescored.em:.3f}/{rescored.f1:.3f} its predictions score on this "
                    f"machine's gold")
        if sha256_bytes(units_bytes(row["scorer_version"], rescored.units)) != \
                row["scores_sha256"]:
            return "its per-question scores are not what its predictions score on this " \
                   "machine's gold"
        return ""
