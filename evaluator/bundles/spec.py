"""Submission registry: `submissions/<id>/bundle.yaml` describes one frozen submission.

Kinds:
  command      the CodaLab contract: an environment plus a command with {input}/{output}
  predictions  frozen prediction files per test set (a leaderboard's stored outputs)
  hf-qa        a Transformers extractive-QA checkpoint run by our own runner
  generative   a prompted language model, local or behind an OpenAI-compatible endpoint
  approach     a modeling approach the service trains and freezes (`training`)

What a folder says is read and checked here (`from_folder`); variants asked for on the
command line are `bundles.variants`, models named by a hub id `bundles.hub`.

A bundle's digest hashes every file in its folder (and, through bundle.yaml, the sha256 of
any file it references), so a changed submission is a different submission.

A command bundle or an approach may name shared code: `libraries: [NAME]` is the Python
package `_libraries/NAME/` beside the bundle folders. Runners put it on the program's
PYTHONPATH (read-only), and its files enter the bundle's digest.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from evaluator.bundles import policy
from evaluator.bundles.hub import HUB_ID, hub_missing, hub_snapshot
from evaluator.bundles.schema import BundleFile, GenerationFile, PromptFile
from evaluator.core import folders as registry
from evaluator.core import settings
from evaluator.core.errors import ConfigError
from evaluator.core.gate import folder_digest, weights_sha256
from evaluator.core.hashing import canonical_json, sha256_bytes
from evaluator.core.schema import validate
from evaluator.data import testsets
from evaluator.data.fetch import Source
from evaluator.qa.prompting import PromptSpec

TRAIN_PLACEHOLDERS = ("{train}", "{model}", "{checkpoints}")
PREPARED = "{prepared}"  # an approach's prepared folder, in its command and train
LIBRARIES = "_libraries"  # beside the bundle folders: shared code that bundles name
LIBRARY_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")  # an importable package name


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
    model: dict = field(default_factory=dict)  # hf-qa: path|cache|hub, sha256, onnx, batch_size, qa
    model_args: dict = field(default_factory=dict)  # evaluate --model-args: part of the digest
    train_command: str | None = None  # approach: {train} {config} {model} {checkpoints}
    prepare_command: str | None = None  # approach: {input} {prepared}, run once per input
    hyperparameters: dict = field(default_factory=dict)  # approach: defaults, search
    weights_digest: str | None = None  # a trained system: its weights, part of its digest
    system_key: str | None = None  # a trained system: its train cell, part of its digest (two
    # systems that trained to identical weights are still two systems, two cells)
    libraries: tuple[Path, ...] = ()  # shared packages (`libraries:`), on its PYTHONPATH
    generative: dict = field(default_factory=dict)  # prompt, generation, endpoint (generative)

    @property
    def digest(self) -> str:
        """Everything in the folder and in the libraries it names; and the weights, when they
        live outside it unpinned (a trained system, an hf-qa checkpoint in a model store):
        retraining a checkpoint in place is then a different submission, never a cached one."""
        weights = self.weights_digest or self._outside_weights()
        shots = self.generative.get("prompt", {}).get("shots_from") \
            if self.generative.get("prompt", {}).get("shots") else None
        if weights is None and not self.model_args and not self.libraries and not shots:
            return folder_digest(self.folder)
        parts = [folder_digest(self.folder), weights]
        if shots:  # the demonstrations are drawn from these bytes
            parts.append({"shots_from": testsets.get(shots).sha256})
        if self.model_args:
            parts.append(self.model_args)
        if self.libraries:
            parts.append({lib.name: folder_digest(lib) for lib in self.libraries})
        if self.system_key:
            parts.append({"system": self.system_key})
        return sha256_bytes(canonical_json(parts))

    def _outside_weights(self) -> str | None:
        if self.kind not in ("hf-qa", "generative") or not self.model or \
                self.model.get("sha256"):
            return None  # no checkpoint, or its digest is pinned in bundle.yaml
        if "cache" in self.model:
            directory = settings.cache_dir() / self.model["cache"]
        elif "hub" in self.model:
            directory = hub_snapshot(self.model["hub"], self.model.get("revision"))
            return "missing" if directory is None else weights_sha256(directory)
        elif Path(self.model["path"]).is_absolute():
            directory = Path(self.model["path"])
        else:
            return None  # inside the folder: already hashed with it
        return weights_sha256(directory) if directory.is_dir() else "missing"

    @property
    def timeout(self) -> float:
        return float(self.resources["timeout"])

    def applicable(self, testset_id: str) -> str | None:
        """None if the bundle can run on the test set, else the reason it cannot."""
        if (why := self.blocked()) is not None:
            return why
        if self.kind == "predictions" and testset_id not in self.predictions:
            have = ", ".join(sorted(self.predictions)) or "none"
            return f"stored predictions only for {have}"  # one reason for all other sets
        return None

    def blocked(self) -> str | None:
        """Why the bundle cannot run on any set here (whatever the set), or None."""
        if self.status != "ready":
            return f"bundle is {self.status}"
        if self.kind == "approach":
            return "an approach is trained first: evaluate one of its systems (APPROACH@SPLIT/sN)"
        if self.kind in ("hf-qa", "generative") and "cache" in self.model and \
                not (settings.cache_dir() / self.model["cache"]).exists():
            how = self.model.get("rebuild", "build it")
            return f"its trained weights are not in the cache ({how})"
        if self.kind in ("hf-qa", "generative") and "hub" in self.model and \
                hub_snapshot(self.model["hub"], self.model.get("revision")) is None:
            return hub_missing(self.model["hub"], self.model.get("revision"))
        return None


def check_links(folder: Path, links_inside: bool = False) -> None:
    """Refuse a folder that is a link or holds one, or a hard-linked file, as the gate's walk
    (`core.gate.walk`) will when the folder is hashed: a link can show a submission files it
    was never given (another set's gold answers, host secrets). Refused here, the folder is
    listed as broken instead of failing every command that hashes it. `links_inside` lets a
    link stay that resolves inside the folder (a Hugging Face cache's snapshots link into
    its blobs, and its weights are hashed following them)."""
    if folder.is_symlink():
        raise ConfigError(f"{folder} is a link (to {os.readlink(folder)}); links are refused")
    root = folder.resolve()
    for top, dirs, files in os.walk(folder):  # never follows links
        for name in dirs + files:
            path = Path(top) / name
            info = path.lstat()
            rel = path.relative_to(folder).as_posix()
            if stat.S_ISLNK(info.st_mode):
                target = path.resolve()
                leaves = target != root and root not in target.parents
                if links_inside and not leaves:
                    continue
                raise ConfigError(f"{folder}: link {rel} -> {os.readlink(path)} " + (
                    "leaves the bundle folder; refused" if leaves else
                    "is refused too, though it stays inside (copy the file instead)"))
            elif stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
                raise ConfigError(f"{folder}: {rel} is hard-linked to a file elsewhere; "
                                  f"refused (copy it instead)")
            elif not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
                raise ConfigError(f"{folder}: {rel} is not a regular file or folder; refused")


def from_folder(folder: Path) -> Bundle:
    where = folder / "bundle.yaml"
    check_links(folder)  # first: a bundle.yaml linked out of the folder is never read
    spec = validate(BundleFile, registry.read_yaml(where), where)
    if spec.id != folder.name:
        raise ConfigError(f"{where}: id {spec.id!r} must equal the folder name {folder.name!r}")
    ready = spec.status == "ready"
    # an approach whose systems generate their answers: prompt:/generation: instead of command:
    generative_systems = spec.kind == "approach" and (spec.prompt or spec.generation) is not None
    if spec.kind in ("command", "approach") and ready and not generative_systems:
        if not spec.command or "{input}" not in spec.command or "{output}" not in spec.command:
            raise ConfigError(f"{where}: command must contain the {{input}} and {{output}} "
                              f"placeholders")
    if spec.kind == "approach" and ready:
        missing = [p for p in TRAIN_PLACEHOLDERS if p not in (spec.train or "")]
        if missing:
            raise ConfigError(f"{where}: an approach needs train: a command with the "
                              f"{', '.join(TRAIN_PLACEHOLDERS)} placeholders (missing "
                              f"{', '.join(missing)})")
        if not generative_systems and "{model}" not in spec.command:
            raise ConfigError(f"{where}: an approach's command (predict) needs the {{model}} "
                              f"placeholder")
    elif spec.train is not None:
        raise ConfigError(f"{where}: train: is for kind approach only")
    if spec.prepare is not None or PREPARED in (spec.command or "") + (spec.train or ""):
        _check_prepare(spec, where)
    libraries = _libraries(spec, folder, where)
    if spec.kind == "predictions" and not spec.predictions:
        raise ConfigError(f"{where}: a predictions bundle needs at least one predictions entry")
    predictions = {set_id: Source(src.file, src.sha256.lower(), src.url)
                   for set_id, src in spec.predictions.items()}
    model = _hf_qa_model(spec, folder, where) if spec.kind == "hf-qa" and ready else {}
    generative = {}
    if spec.kind == "generative":
        generative = _generative(spec, where)
        if spec.model is not None:
            model = _hf_qa_model(spec, folder, where)
    elif generative_systems:
        generative = _generative_systems(spec, where)
    elif spec.prompt or spec.generation or spec.endpoint:
        raise ConfigError(f"{where}: prompt:, generation: and endpoint: are for kind "
                          f"generative (and prompt:, generation: for an approach whose "
                          f"systems generate their answers)")
    return Bundle(
        id=spec.id, name=spec.name, kind=spec.kind, folder=folder, command=spec.command,
        environment=spec.environment.model_dump(exclude_none=True),
        resources=policy.current().resources(spec.resources, where),
        predictions=predictions,
        reference_scores=spec.reference_scores.model_dump(exclude_none=True),
        metadata=dict(spec.metadata), status=spec.status, model=model,
        train_command=spec.train, prepare_command=spec.prepare,
        hyperparameters=spec.hyperparameters.model_dump(),
        libraries=libraries, generative=generative,
    )


def _check_prepare(spec: BundleFile, where: Path) -> None:
    """`prepare:` (an approach's work on an input that no system's weights change, run once
    per input and handed to every system's train and predict commands as {prepared})."""
    if spec.kind != "approach":
        raise ConfigError(f"{where}: prepare: and the {PREPARED} placeholder are for kind "
                          f"approach only")
    if spec.prepare is None:
        raise ConfigError(f"{where}: {PREPARED} is used but there is no prepare: command")
    if "{input}" not in spec.prepare or PREPARED not in spec.prepare:
        raise ConfigError(f"{where}: prepare: must contain the {{input}} and {PREPARED} "
                          f"placeholders")
    for name, command in (("command", spec.command), ("train", spec.train)):
        if PREPARED not in (command or ""):
            raise ConfigError(f"{where}: {name}: must take the prepared folder ({PREPARED}) "
                              f"when there is a prepare: command")


def _generative_systems(spec: BundleFile, where: Path) -> dict:
    """An approach whose trained systems are generative bundles: its weights folder is a
    Transformers model that the service runs under this prompt and decoding (so a trained
    system runs as every generative bundle does, served by an endpoint too). No command:
    nothing of the approach's code runs at prediction time."""
    if spec.command is not None or spec.prepare is not None or spec.endpoint is not None:
        raise ConfigError(f"{where}: an approach with prompt:/generation: has no command:, "
                          f"prepare: or endpoint: (its systems run as generative bundles)")
    if spec.prompt is not None and spec.prompt.shots:
        raise ConfigError(f"{where}: an approach's prompt takes no shots: its systems are "
                          f"trained on the prompts they answer")
    return _prompt_and_generation(spec, where)


def _generative(spec: BundleFile, where: Path) -> dict:
    """A generative bundle's prompt, decoding and (instead of `model`) endpoint, each with
    its defaults filled in: all of it is part of the bundle, so of every job key."""
    if (spec.model is None) == (spec.endpoint is None):
        raise ConfigError(f"{where}: a generative bundle needs one of model: {{path | cache | "
                          f"hub}} (a local Transformers model) or endpoint: {{url, model}} (an "
                          f"OpenAI-compatible server)")
    if spec.command is not None or spec.onnx or spec.qa is not None:
        raise ConfigError(f"{where}: command:, onnx: and qa: are not for a generative bundle")
    out = _prompt_and_generation(spec, where)
    if spec.endpoint is not None:
        out["endpoint"] = spec.endpoint.model_dump()
        problem = policy.endpoint_url_problem(str(out["endpoint"]["url"]))
        if problem:
            raise ConfigError(f"{where}: endpoint.url {problem}")
    return out


def _prompt_and_generation(spec: BundleFile, where: Path) -> dict:
    prompt = spec.prompt or PromptFile()
    try:
        PromptSpec(**prompt.model_dump())
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return {"prompt": prompt.model_dump(),
            "generation": (spec.generation or GenerationFile()).model_dump()}


def _libraries(spec: BundleFile, folder: Path, where: Path) -> tuple[Path, ...]:
    """The folders of the shared packages a command bundle or an approach names: each
    `<bundle root>/_libraries/NAME/` with an `__init__.py`, checked like a bundle folder."""
    if spec.libraries and spec.kind not in ("command", "approach"):
        raise ConfigError(f"{where}: libraries: is for command bundles and approaches")
    out = []
    for name in spec.libraries:
        if not LIBRARY_NAME.match(name):
            raise ConfigError(f"{where}: library {name!r} is not a Python package name "
                              f"(lower case letters, digits, _)")
        library = folder.parent / LIBRARIES / name
        if not (library / "__init__.py").is_file():
            raise ConfigError(f"{where}: library {name!r} not found (expected the package "
                              f"{library}/__init__.py)")
        check_links(library)
        out.append(library)
    if len(set(out)) != len(out):
        raise ConfigError(f"{where}: a library is named twice")
    return tuple(out)


def _hf_qa_model(spec: BundleFile, folder: Path, where: Path) -> dict:
    """An hf-qa bundle's `model: {path | cache, sha256}` plus its `onnx` (false | true |
    int8), `batch_size` and `qa` (max_seq_len, doc_stride, max_answer_len) run options.

    `path` must stay inside the bundle folder and `cache` inside the cache dir (the model
    store): a bundle never names an arbitrary host folder to be mounted or copied."""
    model = spec.model
    given = [k for k in ("path", "cache", "hub") if model is not None and getattr(model, k)]
    if len(given) != 1:
        raise ConfigError(f"{where}: an {spec.kind} bundle needs one of model: {{path: DIR}} "
                          f"(inside the bundle), {{cache: KEY}} (under the cache dir) or {{hub: "
                          f"ORG/NAME}} (the local Hugging Face cache)")
    if model.revision is not None and model.hub is None:
        raise ConfigError(f"{where}: model.revision goes with model.hub")
    if model.hub is not None:
        if not HUB_ID.match(model.hub):
            raise ConfigError(f"{where}: model.hub {model.hub!r} is not a Hugging Face id "
                              f"(ORG/NAME or NAME)")
    elif model.path is not None and not Path(model.path).is_absolute():
        inside(folder, folder / model.path, f"{where}: model.path {model.path!r}")
    elif model.path is not None:
        stores = (settings.cache_dir(), *settings.current().model_stores)
        if not any(_within(store, Path(model.path)) for store in stores):
            raise ConfigError(f"{where}: model.path {model.path!r} leaves the bundle folder "
                              f"and every model store ({', '.join(map(str, stores))}); "
                              f"refused (add a store with QASHIFT_MODEL_STORE)")
    else:
        store = settings.cache_dir()
        inside(store, store / model.cache, f"{where}: model.cache {model.cache!r}")
    options = {"onnx": spec.onnx, "batch_size": spec.batch_size,
               "qa": spec.qa.model_dump(exclude_none=True) if spec.qa else None}
    return {**model.model_dump(exclude_none=True),
            **{k: v for k, v in options.items() if v not in (None, False)}}


def _within(root: Path, path: Path) -> bool:
    resolved, top = path.resolve(), root.resolve()
    return resolved == top or top in resolved.parents


def inside(root: Path, path: Path, what: str) -> Path:
    """`path` with links resolved, if it stays under `root`; else a ConfigError."""
    if not _within(root, path):
        raise ConfigError(f"{what} leaves {root}; refused")
    return path.resolve()


_REGISTRY = registry.FolderRegistry("bundle", "bundle.yaml", settings.submissions_dir,
                                     lambda folder: from_folder(folder),
                                     variable="QASHIFT_SUBMISSIONS")
available, get, resolve, scan, none_here = (
    _REGISTRY.available, _REGISTRY.get, _REGISTRY.resolve, _REGISTRY.scan, _REGISTRY.none_here)
