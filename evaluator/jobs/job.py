"""A job is one cell of the matrix: (bundle, test set, options), with a content-addressed key.

The key changes when anything that can change the score changes: the bundle's files, the
test set's bytes, the scorer's version or a relevant option. It does not depend on names,
paths, the runner or the confidence level (intervals are recomputed from stored scores).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from evaluator.bundles.spec import Bundle
from evaluator.core.hashing import canonical_json, sha256_bytes
from evaluator.data.testsets import Dataset, TestSet
from evaluator.scoring.squad_v1 import SCORER_VERSIONS


@dataclass(frozen=True)
class Job:
    bundle: Bundle
    testset: TestSet
    options: dict = field(default_factory=dict)

    @property
    def scorer_version(self) -> str:
        return SCORER_VERSIONS[self.testset.scorer]

    @property
    def key(self) -> str:
        spec = {"bundle_digest": self.bundle.digest, "testset_sha256": self.testset.sha256,
                "scorer_version": self.scorer_version, "options": self.options}
        return sha256_bytes(canonical_json(spec))

    def dataset(self, mirrors: list[Path] | None = None) -> Dataset:
        """The questions this job is scored on: the test set, or its --limit sample."""
        dataset = self.testset.load(mirrors)
        if "limit" in self.options:
            return dataset.limited(int(self.options["limit"]), int(self.options.get("seed", 0)))
        return dataset

    @property
    def label(self) -> str:
        return f"{self.bundle.id} x {self.testset.id}"
