"""A train cell: (approach, training split, hyperparameters, seed, train size), and its key.

The key changes with anything that can change the weights: the approach folder (its code,
pinned environment and image), the split's bytes, the downsample size, the hyperparameters and
the seed. The frozen system it produces is named `APPROACH@SPLIT[~SIZE]/sSEED[/hHASH]`, the
hash present only when the hyperparameters differ from the approach's defaults.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from evaluator.bundles.spec import Bundle
from evaluator.core.errors import UserError
from evaluator.core.hashing import canonical_json, sha256_bytes
from evaluator.data.derive.splits import sample_questions
from evaluator.data.testsets import TestSet

SYSTEM_ID = re.compile(r"^(?P<approach>[^@/~]+)@(?P<split>[^@/~]+)(~(?P<size>\d+))?"
                       r"/s(?P<seed>-?\d+)(/h(?P<hp>[0-9a-f]{8}))?$")


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
        spec = {"approach_digest": self.approach.digest, "split_sha256": self.split.sha256,
                "train_size": self.size, "hyperparameters": self.hyperparameters,
                "seed": self.seed}
        return sha256_bytes(canonical_json(spec))

    @property
    def system_id(self) -> str:
        size = f"~{self.size}" if self.size else ""
        changed = {k: v for k, v in self.hyperparameters.items() if self.defaults.get(k) != v}
        hp = f"/h{sha256_bytes(canonical_json(changed))[:8]}" if changed else ""
        return f"{self.approach.id}@{self.split.id}{size}/s{self.seed}{hp}"


def parse_system_id(system_id: str) -> dict | None:
    """The parts of `APPROACH@SPLIT[~SIZE]/sSEED[/hHASH]`, or None if it is not one."""
    match = SYSTEM_ID.match(system_id)
    if match is None:
        return None
    parts = match.groupdict()
    return {"approach": parts["approach"], "split": parts["split"],
            "size": int(parts["size"]) if parts["size"] else None,
            "seed": int(parts["seed"]), "hp": parts["hp"]}


def downsample(raw: dict, size: int, seed: int) -> dict:
    """`size` questions of a SQuAD-format file, drawn with `seed` (the derive transform
    `downsample` gives the same questions for the same seed)."""
    return sample_questions(raw, size, random.Random(seed))
