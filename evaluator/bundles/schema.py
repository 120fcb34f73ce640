"""What a `bundle.yaml` may say, key by key. Unknown keys are errors; isolation settings
(user, writable root, build network, volumes, privileges) are not bundle keys at all: they are
the operator's (`bundles.policy`)."""

from __future__ import annotations

from datetime import date
from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from evaluator.core.schema import Identifier, Name, Sha256, SourceRef, Strict, Text
from evaluator.qa.prompting import DEFAULT_TEMPLATE

Scalar = Text | bool | int | float | date | None
Positive = Annotated[int, Field(gt=0)]
Scalars = Annotated[list[Scalar], Field(max_length=100)]
Record = Annotated[dict[Name, Scalar], Field(max_length=100)]  # e.g. a training recipe


class Environment(Strict):
    image: Name | None = None  # name@sha256:... or a local image id
    build: Name | None = None  # a Dockerfile in the bundle folder
    requirements: Name | None = None  # a pinned requirements file (local runner)


class ReferenceScores(Strict):
    testset: Name | None = None
    em: float | None = None
    f1: float | None = None
    source: Text | None = None


class ModelRef(Strict):
    path: Name | None = None  # a checkpoint folder inside the bundle folder
    cache: Name | None = None  # or one under the cache dir (the model store)
    hub: Name | None = None  # or a Hugging Face id (org/name) in the local HF cache
    revision: Name | None = None  # with hub: a branch, tag or commit (default main)
    sha256: Sha256 | None = None  # the weights' digest (core.hashing.weights_sha256)
    rebuild: Text | None = None  # how to rebuild weights missing from the cache


class QAOptions(Strict):
    max_seq_len: Positive | None = None
    doc_stride: Positive | None = None
    max_answer_len: Positive | None = None


class PromptFile(Strict):
    """A generative bundle's prompt (evaluator.qa.prompting)."""

    template: Text = DEFAULT_TEMPLATE  # {context} and {question} are filled in
    shots: Annotated[int, Field(ge=0, le=64)] = 0
    shots_from: Name | None = None  # the training split demonstrations are drawn from
    seed: int = 0
    separator: Text = "\n\n"
    instruction: Text = ""


class GenerationFile(Strict):
    """A generative bundle's decoding: greedy, then the extraction rule."""

    max_new_tokens: Annotated[int, Field(gt=0, le=1024)] = 32
    stop: Annotated[list[Text], Field(max_length=8)] = Field(default_factory=lambda: ["\n"])
    extraction: Literal["first-line", "raw"] = "first-line"
    batch_size: Positive | None = None


class EndpointRef(Strict):
    """An OpenAI-compatible server a generative bundle's questions are sent to."""

    url: Annotated[str, StringConstraints(pattern=r"^https?://[^\s]+$", max_length=500)]
    model: Text
    api: Literal["completions", "chat"] = "completions"
    api_key_env: Annotated[str, StringConstraints(pattern=r"^[A-Z_][A-Z0-9_]*$")] | None = None
    concurrency: Annotated[int, Field(gt=0, le=64)] = 4
    timeout: Annotated[float, Field(gt=0, le=600)] = 60
    retries: Annotated[int, Field(ge=0, le=10)] = 4


class Hyperparameters(Strict):
    defaults: dict[Name, Scalar] = Field(default_factory=dict)
    search: dict[Name, Scalars] = Field(default_factory=dict)  # values a search may draw


class BundleFile(Strict):
    id: Identifier  # the folder's name
    name: Name
    kind: Literal["command", "predictions", "hf-qa", "approach", "generative"]
    status: Literal["ready", "awaiting-program"] = "ready"
    command: Text | None = None  # predict: {input} {output} (and {model} for an approach)
    train: Text | None = None  # an approach's training: {train} {config} {model} {checkpoints}
    prepare: Text | None = None  # an approach's shared per-input work: {input} {prepared}
    libraries: list[Name] = Field(default_factory=list, max_length=8)  # <root>/_libraries/NAME
    hyperparameters: Hyperparameters = Hyperparameters()
    environment: Environment = Environment()
    resources: dict[str, object] = Field(default_factory=dict)  # checked by the policy
    network: Literal[False] = False
    predictions: dict[Name, SourceRef] = Field(default_factory=dict)
    reference_scores: ReferenceScores = ReferenceScores()
    metadata: dict[Name, Scalar | Scalars | Record] = Field(default_factory=dict, max_length=100)
    codalab: dict[Name, Scalar] = Field(default_factory=dict, max_length=50)
    model: ModelRef | None = None
    onnx: bool | Literal["int8"] = False
    batch_size: Positive | None = None
    qa: QAOptions | None = None
    prompt: PromptFile | None = None  # generative
    generation: GenerationFile | None = None  # generative
    endpoint: EndpointRef | None = None  # generative, instead of model
