"""Submission registry: `submissions/<id>/bundle.yaml` describes one frozen submission.

Kinds:
  command      the CodaLab contract: an environment plus a command with {input}/{output}
  predictions  frozen prediction files per test set (a leaderboard's stored outputs)
  hf-qa        a Transformers extractive-QA checkpoint run by our own runner

A bundle's digest hashes every file in its folder (and, through bundle.yaml, the sha256 of
any file it references), so a changed submission is a different submission.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from evaluator.core import folders as registry
from evaluator.core import settings
from evaluator.core.errors import ConfigError, UserError
from evaluator.core.hashing import folder_digest
from evaluator.data.fetch import Source

KINDS = ("command", "predictions", "hf-qa")
DEFAULT_RESOURCES = {"gpus": 0, "cpus": 1, "memory": "4g", "timeout": 3600}


@dataclass(frozen=True)
class Bundle:
    id: str
    name: str
    kind: str
    folder: Path
    command: str | None = None
    environment: dict = field(default_factory=dict)
    resources: dict = field(default_factory=dict)
    predictions: dict[str, Source] = field(default_factory=dict)
    reference_scores: dict = field(default_factory=dict)
    metadata: dict = field(default_factory=dict)
    status: str = "ready"
    model: dict = field(default_factory=dict)  # hf-qa: path|cache, sha256, onnx, batch_size, qa

    @property
    def digest(self) -> str:
        return folder_digest(self.folder)

    @property
    def timeout(self) -> float:
        return float(self.resources.get("timeout", DEFAULT_RESOURCES["timeout"]))

    def applicable(self, testset_id: str) -> str | None:
        """None if the bundle can run on the test set, else the reason it cannot."""
        if self.status != "ready":
            return f"bundle is {self.status}"
        if self.kind == "predictions" and testset_id not in self.predictions:
            have = ", ".join(sorted(self.predictions)) or "none"
            return f"no stored predictions for {testset_id} (has: {have})"
        if self.kind == "hf-qa" and "cache" in self.model and \
                not (settings.cache_dir() / self.model["cache"]).exists():
            how = self.model.get("rebuild", "build it")
            return f"its trained weights are not in the cache ({how})"
        return None


def parse_memory(value: int | float | str) -> int:
    """Bytes from 4g, 512m, 1.5GiB, 1048576 (plain numbers are bytes)."""
    if isinstance(value, (int, float)):
        return int(value)
    match = re.fullmatch(r"\s*([0-9.]+)\s*([kmgt]?)(i?b)?\s*", str(value).lower())
    if not match:
        raise UserError(f"cannot read memory size {value!r}; use e.g. 512m or 4g")
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[match.group(2)]
    return int(float(match.group(1)) * scale)


def from_folder(folder: Path) -> Bundle:
    where = folder / "bundle.yaml"
    data = registry.read_yaml(where)
    registry.require(data, ("id", "name", "kind"), where)
    if data["id"] != folder.name:
        raise ConfigError(f"{where}: id {data['id']!r} must equal the folder name {folder.name!r}")
    if data["kind"] not in KINDS:
        raise ConfigError(f"{where}: kind must be one of {', '.join(KINDS)}, got {data['kind']!r}")
    if data.get("network", False):
        raise ConfigError(f"{where}: network must be false: submissions never get a network")
    status = data.get("status", "ready")
    command = data.get("command")
    if data["kind"] in ("command",) and status == "ready":
        if not command or "{input}" not in command or "{output}" not in command:
            raise ConfigError(f"{where}: command must contain the {{input}} and {{output}} "
                              f"placeholders")
    predictions = {}
    for set_id, src in (data.get("predictions") or {}).items():
        if not isinstance(src, dict) or "file" not in src or "sha256" not in src:
            raise ConfigError(f"{where}: predictions.{set_id} needs file and sha256")
        predictions[set_id] = Source(src["file"], str(src["sha256"]).lower(), src.get("url"))
    if data["kind"] == "predictions" and not predictions:
        raise ConfigError(f"{where}: a predictions bundle needs at least one predictions entry")
    model = _hf_qa_model(data, where) if data["kind"] == "hf-qa" and status == "ready" else {}
    resources = {**DEFAULT_RESOURCES, **(data.get("resources") or {})}
    return Bundle(
        id=data["id"], name=data["name"], kind=data["kind"], folder=folder, command=command,
        environment=data.get("environment") or {}, resources=resources,
        predictions=predictions, reference_scores=data.get("reference_scores") or {},
        metadata=data.get("metadata") or {}, status=status, model=model,
    )


def _hf_qa_model(data: dict, where: Path) -> dict:
    """An hf-qa bundle's `model: {path | cache, sha256}` plus its `onnx` (false | true |
    int8), `batch_size` and `qa` (max_seq_len, doc_stride, max_answer_len) run options."""
    model = data.get("model")
    if not isinstance(model, dict) or len({"path", "cache"} & set(model)) != 1:
        raise ConfigError(f"{where}: an hf-qa bundle needs model: {{path: DIR}} (relative to "
                          f"the bundle) or model: {{cache: KEY}} (under the cache dir)")
    if data.get("onnx", False) not in (False, True, "int8"):
        raise ConfigError(f"{where}: onnx must be false, true or int8")
    return {**model, **{k: data[k] for k in ("onnx", "batch_size", "qa") if k in data}}


_REGISTRY = registry.FolderRegistry("bundle", "bundle.yaml", settings.submissions_dir,
                                     lambda folder: from_folder(folder))
available, get, resolve = _REGISTRY.available, _REGISTRY.get, _REGISTRY.resolve
