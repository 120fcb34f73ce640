"""A job is one cell of the matrix: (bundle, test set, options), with a content-addressed key.

The key changes when anything that can change the score changes: the bundle's files, the
test set's bytes, the scorer's version or a relevant option. It does not depend on names,
paths, the runner or the confidence level (intervals are recomputed from stored scores).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from evaluator.bundles.spec import Bundle
from evaluator.core.hashing import canonical_json, sha256_bytes
from evaluator.data.testsets import TestSet
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

    @property
    def label(self) -> str:
        return f"{self.bundle.id} x {self.testset.id}"
