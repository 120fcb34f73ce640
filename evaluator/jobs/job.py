"""A job is one cell of the matrix: (bundle, test set, options), with a content-addressed key.

The key changes when anything that can change the score changes: the bundle's files, the
test set's bytes, the scorer's version or a relevant option; and with the test set's id, since
a stored result answers for one named cell (two folders of the same bytes, such as the test
parts of `babi-1` and `babi-1-9k`, are two cells; the bundle's id is in its files). It does
not depend on paths, the runner or the confidence level (intervals are recomputed from
stored scores).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from evaluator import scoring
from evaluator.bundles.spec import Bundle
from evaluator.core.hashing import canonical_json, sha256_bytes
from evaluator.data.testsets import Dataset, TestSet


@dataclass(frozen=True)
class Job:
    bundle: Bundle
    testset: TestSet
    options: dict = field(default_factory=dict)

    @property
    def scorer_version(self) -> str:
        return scoring.version(self.testset.scorer)

    @property
    def key(self) -> str:
        return cell_key(self.bundle.digest, self.testset.id, self.testset.sha256,
                        self.scorer_version, self.options)

    def dataset(self, mirrors: list[Path] | None = None) -> Dataset:
        """The questions this job is scored on: the test set, or its --limit sample."""
        dataset = self.testset.load(mirrors)
        if "limit" in self.options:
            return dataset.limited(int(self.options["limit"]), int(self.options.get("seed", 0)))
        return dataset

    @property
    def label(self) -> str:
        return f"{self.bundle.id} x {self.testset.id}"


def cell_key(bundle_digest: str, testset_id: str, testset_sha256: str, scorer_version: str,
             options: dict) -> str:
    """The key of a cell's stored result (see the module docstring)."""
    return _hashed(bundle_digest=bundle_digest, testset=testset_id,
                   testset_sha256=testset_sha256, scorer_version=scorer_version, options=options)


# A system id: `APPROACH@SPLIT[~SIZE]/sSEED[/hHASH]` (`training.job.TrainJob.system_id`).
SYSTEM_ID = re.compile(r"(?P<approach>[^@/~]+)@(?P<split>[^@/~]+)(~(?P<size>\d+))?"
                       r"/s(?P<seed>-?\d+)(/h(?P<hp>[0-9a-f]{8}))?")


def format_system_id(approach: str, split: str, size: int | None, seed: int, hp: str | None) -> str:
    """`APPROACH@SPLIT[~SIZE]/sSEED[/hHASH]`, the id of the system a train cell makes."""
    return f"{approach}@{split}{f'~{size}' if size else ''}/s{seed}{f'/h{hp}' if hp else ''}"


def parse_system_id(system_id: str) -> dict | None:
    """The parts of `APPROACH@SPLIT[~SIZE]/sSEED[/hHASH]`, or None if it is not one."""
    match = SYSTEM_ID.fullmatch(system_id)
    if match is None:
        return None
    parts = match.groupdict()
    return {"approach": parts["approach"], "split": parts["split"],
            "size": int(parts["size"]) if parts["size"] else None,
            "seed": int(parts["seed"]), "hp": parts["hp"]}


def train_key(approach_digest: str, split_sha256: str, train_size: int | None,
              hyperparameters: dict, seed: int) -> str:
    """The key of a train cell, and so of the system it makes (`training.job.TrainJob`): what
    can change the weights, and nothing else (not the approach's or the split's name)."""
    return _hashed(approach_digest=approach_digest, split_sha256=split_sha256,
                   train_size=train_size, hyperparameters=hyperparameters, seed=seed)


def name_free_key(bundle_digest: str, testset_sha256: str, scorer_version: str,
                  options: dict) -> str:
    """The key stores gave a cell before the test set's id was part of it: only to find
    such rows and give them their key (`store.rows.current_key`)."""
    return _hashed(bundle_digest=bundle_digest, testset_sha256=testset_sha256,
                   scorer_version=scorer_version, options=options)


def _hashed(**spec: object) -> str:
    return sha256_bytes(canonical_json(spec))
