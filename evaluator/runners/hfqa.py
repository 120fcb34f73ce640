"""The `hf-qa` runner: an hf-qa bundle's checkpoint answers the answer-free input through
`evaluator.qa` (the QA program), here or in a child process.

- `HFQARunner(subprocess=True)` (what the local backend uses): a child process
  `python -m evaluator.qa ...` with the bundle's time limit, so a crash or an out-of-memory
  kill is a failed cell, not a dead evaluator;
- `HFQARunner(subprocess=False)`: in this process (tests, benchmarks).
The Docker backend runs the same program in the standard runner image (runners.docker).

Bundle fields (bundle.yaml, kind hf-qa):
  model: {path: DIR}               checkpoint folder, relative to the bundle or absolute
  model: {cache: NAME}             or a folder under the cache dir (the model store)
  model.rebuild                    the command that rebuilds missing cached weights
  model.sha256                     optional pin of the weights (evaluator.qa.weights)
  onnx: false | true | int8        run model.onnx / model.int8.onnx made by `bundles export-onnx`
  batch_size: N                    override the automatic choice
  qa: {max_seq_len, doc_stride, max_answer_len}   override the pipeline's defaults
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from pathlib import Path

from evaluator.bundles.hub import hub_missing, hub_snapshot
from evaluator.bundles.spec import Bundle, check_links
from evaluator.core import settings
from evaluator.core.errors import RunFailure
from evaluator.core.files import run_tempdir
from evaluator.core.gate import Refused, read_json, weights_sha256
from evaluator.qa.decode import QASettings
from evaluator.qa.predict import ModelSpec, NoCUDA, pick_device, predict, program_args
from evaluator.runners import interrupts
from evaluator.runners.base import Exit, RunRecord, RunRequest, classify, read_tail
from evaluator.runners.limits import cancel_all, run_with_limit, thread_settings


def model_spec(bundle) -> ModelSpec:
    """Resolve a bundle's `model` (with its `onnx`, `batch_size` and `qa` options)."""
    model = bundle.model
    if "path" in model:
        directory = Path(model["path"])
        directory = directory if directory.is_absolute() else bundle.folder / directory
    elif "cache" in model:
        directory = settings.cache_dir() / model["cache"]
    elif "hub" in model:
        directory = hub_snapshot(model["hub"], model.get("revision"))
        if directory is None:
            raise RunFailure("build-failed", f"{bundle.id}: "
                             f"{hub_missing(model['hub'], model.get('revision'))}")
    else:
        raise RunFailure("build-failed", f"{bundle.id}: an hf-qa bundle needs model: "
                         f"{{path: DIR}}, {{cache: KEY}} or {{hub: ORG/NAME}}")
    backend = {False: "torch", True: "onnx", "int8": "onnx-int8"}[model.get("onnx", False)]
    qa = model.get("qa") or {}
    qa_settings = QASettings(**{k: int(qa[k]) for k in ("max_seq_len", "doc_stride",
                                                     "max_answer_len") if k in qa})
    return ModelSpec(directory.resolve(), backend, model.get("batch_size"), qa_settings,
                     model.get("sha256"))


def check_model(spec: ModelSpec, bundle: Bundle) -> None:
    """Fail with a clear class and remedy (the bundle's `model.rebuild` where it names one)
    when the weights are missing or not the pinned ones."""
    bundle_id, rebuild = bundle.id, bundle.model.get("rebuild") or "restore the checkpoint folder"
    # a link to gold answers or host files is refused, not mounted; a hub snapshot's files
    # link into its repository's blobs, which is what is checked (and mounted) then
    snapshot = spec.directory.parent.name == "snapshots" and \
        spec.directory.parent.parent.name.startswith("models--")
    check_links(spec.directory.parent.parent if snapshot else spec.directory, links_inside=True)
    if not (spec.directory / "config.json").is_file():
        raise RunFailure("data-unavailable", f"{bundle_id}: no checkpoint at {spec.directory} "
                         f"({rebuild})")
    if spec.backend != "torch" and not spec.onnx_path.is_file():
        raise RunFailure("data-unavailable", f"{bundle_id}: no ONNX export at {spec.onnx_path} "
                         f"(qashift bundles export-onnx {bundle_id}"
                         f"{' --int8' if spec.backend == 'onnx-int8' else ''})")
    if spec.sha256:
        actual = weights_sha256(spec.directory)
        if actual != spec.sha256:
            raise RunFailure("data-unavailable", f"{bundle_id}: weights at {spec.directory} "
                             f"have sha256 {actual[:12]}…, bundle pins {spec.sha256[:12]}… "
                             f"({rebuild}, or update the bundle)")


class HFQARunner:
    """Runs hf-qa bundles; `subprocess=False` runs in this process (tests, benchmarks)."""

    name = "hf-qa"

    def __init__(self, subprocess: bool = True, batch_size: int | None = None,
                 progress: bool = True):
        self.subprocess = subprocess
        self.batch_size = batch_size
        if subprocess:
            interrupts.on_interrupt(cancel_all)
        self.progress = progress

    def run(self, request: RunRequest) -> RunRecord:
        spec = model_spec(request.bundle)
        check_model(spec, request.bundle)
        try:
            device = pick_device(request.device)
        except NoCUDA as exc:
            raise RunFailure("no-gpu-kernel", str(exc)) from None
        if self.subprocess:
            return self._run_child(request, spec, device)
        start = time.perf_counter()
        raw = json.loads(request.input_path.read_text(encoding="utf-8"))
        try:
            answers, details = predict(raw, spec, device=device, batch_size=self.batch_size,
                                       progress=self.progress)
        except MemoryError as exc:
            raise RunFailure("out-of-memory", f"{request.bundle.id}: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - any model error is this submission's failure
            if "out of memory" in str(exc).lower():
                raise RunFailure("out-of-memory", f"{request.bundle.id}: {exc}") from None
            raise RunFailure("nonzero-exit", f"{request.bundle.id}: {type(exc).__name__}: "
                             f"{exc}") from None
        request.output_path.write_text(json.dumps(answers, ensure_ascii=False))
        return RunRecord(runner=self.name, wall_s=time.perf_counter() - start, exit_code=0,
                         peak_memory_bytes=details.get("peak_gpu_bytes",
                                                       details["peak_rss_bytes"]),
                         device="gpu" if device.startswith("cuda") else "cpu",
                         details={**details, "in_process": True, "isolated": False})

    def _run_child(self, request: RunRequest, spec: ModelSpec, device: str) -> RunRecord:
        bundle = request.bundle
        with run_tempdir("hfqa") as tmp:
            record_path = Path(tmp) / "record.json"
            argv = [sys.executable, *program_args(
                spec, model=spec.directory, input_path=request.input_path,
                output_path=request.output_path, record_path=record_path, device=device,
                batch_size=self.batch_size)]
            ended, wall, details = run_program(argv, tmp, bundle, request.cpus, record_path)
        classify(bundle.id, ended)
        return RunRecord(runner=self.name, wall_s=wall, exit_code=0, log=ended.log,
                         peak_memory_bytes=details.get("peak_gpu_bytes", ended.peak_memory),
                         device="gpu" if device.startswith("cuda") else "cpu",
                         details={**details, "in_process": False, "isolated": False},
                         cpu_s=ended.cpu_s)


def run_program(argv: list[str], tmp: str, bundle, cpus: tuple[int, ...],
                record_path: Path) -> tuple[Exit, float, dict]:
    """The QA program (`python -m evaluator.qa ...`) in a child process under the bundle's
    time limit, offline, seeing this checkout's code only: how it ended, its wall seconds and
    the run details it recorded."""
    env = {k: v for k, v in os.environ.items()
           if k in ("PATH", "HOME", "LANG", "LC_ALL", "VIRTUAL_ENV", "CUDA_VISIBLE_DEVICES")}
    env.update({**thread_settings(), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "TMPDIR": tmp, "PYTHONPATH": str(settings.REPO_ROOT)})
    log_path = Path(tmp) / "log.txt"
    exit_code, wall, peak, timed_out, cpu = run_with_limit(
        shlex.join(argv), Path(tmp), env, log_path, bundle.timeout, cpus=cpus)
    return (Exit(exit_code, read_tail(log_path), timed_out, bundle.timeout, peak_memory=peak,
                 cpu_s=cpu), wall, _record(record_path))


def _record(path: Path) -> dict:
    """The program's run details, through the bounded reader; {} when it wrote none."""
    try:
        details = read_json(path, 1 << 20) if os.path.lexists(path) else {}
    except Refused:
        return {}
    return details if isinstance(details, dict) else {}
