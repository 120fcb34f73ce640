"""What a `testset.yaml` may say, key by key; unknown keys are errors."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from evaluator.core.schema import Identifier, Name, Sha256, SourceRef, Strict, Text


class TestSetFile(Strict):
    id: Identifier  # the folder's name
    name: Name
    label: Name | None = None  # the short name figures print (default: name)
    version: Name | int | float
    kind: Literal["original", "replication", "natural-shift", "adversarial", "derived",
                  "synthetic", "training"]  # training: a train split, not a test set
    reference: Name | None = None
    questions: Annotated[int, Field(gt=0)]
    scorer: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9.-]{0,63}$")]  # evaluator.scoring
    cluster: Literal["paragraph", "article"]
    license: Text
    citation: Text
    description: Text = ""
    source: SourceRef | None = None
    file: Name | None = None
    sha256: Sha256 | None = None  # the pinned digest of the data file or generated data
    unaligned_answers: Text | None = None  # why answers need not stand at answer_start
    derive: dict[str, object] | None = None  # checked by derive.DeriveSpec
    train: Name | None = None  # the training-split folder that goes with this test split
