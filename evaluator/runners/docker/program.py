"""What runs inside a container, and where it finds its files.

A command bundle runs its shell command; an `hf-qa` bundle runs our QA program (`python3 -m
evaluator.qa`) in the standard runner image, seeing its checkpoint read-only at /model and
the QA program (`evaluator/qa`, a package that imports nothing else of the project) read-only
under /opt/qashift; an approach runs its train command. The paths here are the container's
side of every mount.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from evaluator import qa
from evaluator.bundles.spec import Bundle
from evaluator.core.errors import UserError
from evaluator.qa.predict import program_args
from evaluator.runners import hfqa
from evaluator.runners.base import GENERATIONS_FILE, PREDICTIONS_FILE, fill_command
from evaluator.runners.images import RUNNER_TAGS

INPUT, OUTPUT, WORKDIR = "/input/input.json", "/output", "/bundle"
MODEL_MOUNT, CODE_MOUNT, RECORD = "/model", "/opt/qashift", "record.json"
CONFIG, CHECKPOINTS = "/input/config.json", "/checkpoints"  # training
LIBRARY_MOUNT = "/libraries"  # shared packages a bundle names (`libraries:`)
PREPARED_MOUNT = "/prepared"  # an approach's prepared folder of the input (`prepare:`)
GENERATIVE_CONFIG = "/input/generative.json"  # a generative bundle's prompt and decoding
MODELS_MOUNT, PLAN = "/models", "/input/plan.json"  # a group of systems (`run_many`)
QA_CODE = Path(qa.__file__).resolve().parent  # the only project code a container sees


@dataclass
class Program:
    """What a container runs: a command bundle's shell command, or our hf-qa program."""
    argv: list[str]
    image: str | None = None  # None: the bundle's environment (image, build or the default)
    mounts: dict[str, Path] = field(default_factory=dict)  # extra read-only binds
    writable: dict[str, Path] = field(default_factory=dict)  # extra writable binds (training)
    environment: dict[str, str] = field(default_factory=dict)
    record: str | None = None  # a file in /output where the program writes its run details


def program_for(bundle: Bundle, gpus: int, prepared: Path | None = None) -> Program:
    """The container's program for a command, hf-qa or generative bundle (a generative
    bundle's config, written by the runner, is mounted at GENERATIVE_CONFIG; a trained
    system's prepared input, read-only at PREPARED_MOUNT)."""
    if bundle.kind == "generative":
        _, mounted, inside = _model(bundle)
        argv = ["python3", "-m", "evaluator.qa", "--generative", GENERATIVE_CONFIG,
                "--model", inside, "--input", INPUT, "--output",
                f"{OUTPUT}/{PREDICTIONS_FILE}", "--generations",
                f"{OUTPUT}/{GENERATIONS_FILE}", "--record", f"{OUTPUT}/{RECORD}",
                "--device", "cuda" if gpus else "cpu"]
        return Program(argv, image=bundle.environment.get("image") or RUNNER_TAGS[gpus > 0],
                       mounts={MODEL_MOUNT: mounted,
                               f"{CODE_MOUNT}/evaluator/qa": QA_CODE},
                       environment={"PYTHONPATH": CODE_MOUNT}, record=RECORD)
    if bundle.kind == "hf-qa":
        spec, mounted, inside = _model(bundle)
        argv = ["python3", *program_args(
            spec, model=inside, input_path=INPUT,
            output_path=f"{OUTPUT}/{PREDICTIONS_FILE}", record_path=f"{OUTPUT}/{RECORD}",
            device="cuda" if gpus else "cpu")]
        return Program(argv, image=bundle.environment.get("image") or RUNNER_TAGS[gpus > 0],
                       mounts={MODEL_MOUNT: mounted,
                               f"{CODE_MOUNT}/evaluator/qa": QA_CODE},
                       environment={"PYTHONPATH": CODE_MOUNT}, record=RECORD)
    if not bundle.command:
        raise UserError(f"{bundle.id} has no command; the docker runner runs command and "
                        f"hf-qa bundles")
    model = bundle.model.get("path")  # a trained system's weights, read-only at /model
    mounts, environment = library_binds(bundle)
    if prepared is not None:
        mounts[PREPARED_MOUNT] = prepared
    return Program(["/bin/sh", "-c", fill_command(
        bundle.command, input=INPUT, output=f"{OUTPUT}/{PREDICTIONS_FILE}", model=MODEL_MOUNT,
        prepared=PREPARED_MOUNT if prepared is not None else None)],
        mounts={**({MODEL_MOUNT: Path(model)} if model else {}), **mounts},
        environment=environment)


def _model(bundle: Bundle):
    """(the checked model spec, the host folder to mount, the model's path inside): a hub
    snapshot's files link to ../../blobs, so its repository is mounted and pointed into."""
    spec = hfqa.model_spec(bundle)
    hfqa.check_model(spec, bundle)
    if "hub" in bundle.model:
        return spec, spec.directory.parent.parent, \
            f"{MODEL_MOUNT}/snapshots/{spec.directory.name}"
    return spec, spec.directory, MODEL_MOUNT


def training_program(staged: Bundle, config: Path, checkpoints: Path,
                     prepared: Path | None = None) -> Program:
    """An approach's train command: the train split at /input/input.json, its config
    read-only, the weights folder at /output, its checkpoint folder writable at /checkpoints,
    its prepared input read-only at PREPARED_MOUNT (`staged`, `config`, `checkpoints` and
    `prepared` are the staged copies a TrainingStage made)."""
    mounts, environment = library_binds(staged)
    if prepared is not None:
        mounts[PREPARED_MOUNT] = prepared
    return Program(["/bin/sh", "-c", fill_command(
        staged.train_command, train=INPUT, config=CONFIG, model=OUTPUT,
        checkpoints=CHECKPOINTS, prepared=PREPARED_MOUNT if prepared is not None else None)],
        mounts={CONFIG: config, **mounts},
        writable={CHECKPOINTS: checkpoints}, environment=environment)


def library_binds(bundle: Bundle) -> tuple[dict[str, Path], dict[str, str]]:
    """The shared packages a bundle names, read-only under /libraries, on its PYTHONPATH."""
    if not bundle.libraries:
        return {}, {}
    return ({f"{LIBRARY_MOUNT}/{lib.name}": lib.resolve() for lib in bundle.libraries},
            {"PYTHONPATH": LIBRARY_MOUNT})
