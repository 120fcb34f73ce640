"""A train cell: (approach, training split, hyperparameters, seed, train size), and its key.

The key changes with anything that can change the weights: the approach folder (its code,
pinned environment and image), the split's bytes, the downsample size, the hyperparameters and
the seed. The frozen system it produces is named `APPROACH@SPLIT[~SIZE]/sSEED[/hHASH]`, the
hash present only when the hyperparameters differ from the approach's defaults.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from evaluator.bundles.spec import Bundle
from evaluator.core.errors import UserError
from evaluator.core.hashing import canonical_json, sha256_bytes
from evaluator.data.derive.splits import sample_questions
from evaluator.data.testsets import TestSet
from evaluator.jobs.job import format_system_id, train_key


@dataclass(frozen=True)
class TrainJob:
    approach: Bundle
    split: TestSet
    seed: int = 0
    size: int | None = None  # a seeded downsample of the split to this many questions
    overrides: dict = field(default_factory=dict)  # hyperparameters differing from defaults

    def __post_init__(self):
        unknown = sorted(set(self.overrides) - set(self.defaults))
        if unknown:
            raise UserError(f"{self.approach.id} has no hyperparameter {unknown[0]!r}; it has: "
                            f"{', '.join(sorted(self.defaults)) or 'none'}")
        if self.size is not None and self.size <= 0:
            raise UserError(f"train size must be positive, got {self.size}")

    @property
    def defaults(self) -> dict:
        return dict(self.approach.hyperparameters.get("defaults") or {})

    @property
    def hyperparameters(self) -> dict:
        return {**self.defaults, **self.overrides}

    @property
    def key(self) -> str:
        return train_key(self.approach.digest, self.split.sha256, self.size,
                         self.hyperparameters, self.seed)

    @property
    def system_id(self) -> str:
        changed = {k: v for k, v in self.hyperparameters.items() if self.defaults.get(k) != v}
        return format_system_id(self.approach.id, self.split.id, self.size, self.seed,
                                sha256_bytes(canonical_json(changed))[:8] if changed else None)


def downsample(raw: dict, size: int, seed: int) -> dict:
    """`size` questions of a SQuAD-format file, drawn with `seed` (the derive transform
    `downsample` gives the same questions for the same seed)."""
    return sample_questions(raw, size, random.Random(seed))
