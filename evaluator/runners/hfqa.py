"""The `hf-qa` runner: a Transformers extractive-QA checkpoint (or its ONNX export) answering
a SQuAD-format input, faster than `transformers.pipeline("question-answering")` and with its
answers (see evaluator.qa_decode for the decoding rules).

Speed comes from tokenizing everything at once, batching windows of similar length with
dynamic padding, ONNX Runtime (optionally int8), and fp16 on CUDA. Three ways to run it:

- `HFQARunner(subprocess=True)` (what the matrix uses with the local runner): a child
  process `python -m evaluator.runners.hfqa ...` with the bundle's time limit, so a crash or
  an out-of-memory kill is a failed cell, not a dead evaluator;
- `HFQARunner(subprocess=False)`: in this process (tests, benchmarks);
- the same module as a program inside the standard runner image (the Docker helper):
  `python -m evaluator.runners.hfqa --model DIR --input IN --output OUT [--onnx|--int8]
  [--batch-size N] [--device cpu|cuda] [--record RECORD.json]`.

Bundle fields (bundle.yaml, kind hf-qa):
  model: {path: DIR}               checkpoint folder, relative to the bundle or absolute
  model: {cache: zoo/NAME}         or a folder under the cache dir (zoo models)
  model.sha256                     optional pin of the weights (evaluator.zoo.weights_sha256)
  onnx: false | true | int8        run model.onnx / model.int8.onnx made by `bundles export-onnx`
  batch_size: N                    override the automatic choice
  qa: {max_seq_len, doc_stride, max_answer_len}   override the pipeline's defaults
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import resource
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from evaluator import paths
from evaluator.errors import RunFailure
from evaluator.qa_decode import (
    QASettings,
    decode,
    items_from_squad,
    length_batches,
    pad,
    tokenize,
)
from evaluator.runners.base import RunRecord, RunRequest, last_line, read_tail

ONNX_FILES = {"fp32": "model.onnx", "int8": "model.int8.onnx"}
ONNX_DIR = "onnx"
CPU_BATCH_CAP = 32
GPU_BATCH_CAP = 256


# ---- model resolution -------------------------------------------------------------------

@dataclass(frozen=True)
class ModelSpec:
    """What an hf-qa bundle asks to run."""

    directory: Path
    backend: str = "torch"  # torch | onnx | onnx-int8
    batch_size: int | None = None
    settings: QASettings = QASettings()
    sha256: str | None = None

    @property
    def onnx_path(self) -> Path:
        kind = "int8" if self.backend == "onnx-int8" else "fp32"
        return self.directory / ONNX_DIR / ONNX_FILES[kind]


def model_spec(bundle) -> ModelSpec:
    """Resolve a bundle's `model` (with its `onnx`, `batch_size` and `qa` options)."""
    model = bundle.model
    if "path" in model:
        directory = Path(model["path"])
        directory = directory if directory.is_absolute() else bundle.folder / directory
    elif "cache" in model:
        directory = paths.cache_dir() / model["cache"]
    else:
        raise RunFailure("build-failed", f"{bundle.id}: an hf-qa bundle needs model: "
                         f"{{path: DIR}} or {{cache: KEY}}")
    backend = {False: "torch", True: "onnx", "int8": "onnx-int8"}[model.get("onnx", False)]
    qa = model.get("qa") or {}
    settings = QASettings(**{k: int(qa[k]) for k in ("max_seq_len", "doc_stride",
                                                     "max_answer_len") if k in qa})
    return ModelSpec(directory.resolve(), backend, model.get("batch_size"), settings,
                     model.get("sha256"))


def check_model(spec: ModelSpec, bundle_id: str) -> None:
    """Fail with a clear class and remedy when the weights are missing or not the pinned ones."""
    rebuild = f"qashift zoo build {bundle_id.removeprefix('zoo-')}" \
        if bundle_id.startswith("zoo-") else "restore the checkpoint folder"
    if not (spec.directory / "config.json").is_file():
        raise RunFailure("data-unavailable", f"{bundle_id}: no checkpoint at {spec.directory} "
                         f"({rebuild})")
    if spec.backend != "torch" and not spec.onnx_path.is_file():
        raise RunFailure("data-unavailable", f"{bundle_id}: no ONNX export at {spec.onnx_path} "
                         f"(qashift bundles export-onnx {bundle_id}"
                         f"{' --int8' if spec.backend == 'onnx-int8' else ''})")
    if spec.sha256:
        from evaluator.zoo import weights_sha256

        actual = weights_sha256(spec.directory)
        if actual != spec.sha256:
            raise RunFailure("data-unavailable", f"{bundle_id}: weights at {spec.directory} "
                             f"have sha256 {actual[:12]}…, bundle pins {spec.sha256[:12]}… "
                             f"({rebuild}, or update the bundle)")


# ---- predictors: one batch of padded arrays in, start/end logits out --------------------

class TorchPredictor:
    def __init__(self, directory: Path, device: str = "cpu", fp16: bool | None = None):
        import torch
        from transformers import AutoModelForQuestionAnswering

        self.torch = torch
        self.device = device
        self.model = AutoModelForQuestionAnswering.from_pretrained(directory).eval().to(device)
        self.fp16 = device.startswith("cuda") if fp16 is None else fp16
        if self.fp16:  # CUDA only: half-precision weights and activations, fp32 logits
            self.model.half()
        self.inputs = set(inspect.signature(self.model.forward).parameters)
        self.hidden = self.model.config.hidden_size
        self.intermediate = getattr(self.model.config, "intermediate_size", 4 * self.hidden)
        self.heads = self.model.config.num_attention_heads

    def __call__(self, batch: dict):
        torch = self.torch
        feed = {k: torch.from_numpy(v).to(self.device) for k, v in batch.items()
                if k in self.inputs}
        with torch.inference_mode():
            out = self.model(**feed)
        return (out.start_logits.float().cpu().numpy(), out.end_logits.float().cpu().numpy())


class OnnxPredictor:
    def __init__(self, path: Path, device: str = "cpu", threads: int | None = None):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if threads:
            options.intra_op_num_threads = threads
        providers = ["CPUExecutionProvider"]
        if device.startswith("cuda") and "CUDAExecutionProvider" in \
                ort.get_available_providers():
            providers.insert(0, "CUDAExecutionProvider")
        self.session = ort.InferenceSession(str(path), options, providers=providers)
        self.inputs = {i.name for i in self.session.get_inputs()}
        config = json.loads((path.parent.parent / "config.json").read_text())
        self.hidden = config.get("hidden_size", 768)
        self.intermediate = config.get("intermediate_size", 4 * self.hidden)
        self.heads = config.get("num_attention_heads", 12)

    def __call__(self, batch: dict):
        start, end = self.session.run(["start_logits", "end_logits"],
                                      {k: v for k, v in batch.items() if k in self.inputs})
        return start, end


def pick_device(requested: str) -> str:
    """'auto'/'gpu' use CUDA when torch sees it; 'cpu' never does."""
    if requested == "cpu":
        return "cpu"
    try:
        import torch

        if torch.cuda.is_available():
            return "cuda"
    except ImportError:
        pass
    if requested in ("gpu", "cuda"):
        raise RunFailure("no-gpu-kernel", "a GPU was requested but CUDA is not available")
    return "cpu"


def auto_batch_size(predictor, max_len: int, device: str) -> int:
    """Largest batch whose activations fit in a quarter of free memory, capped where bigger
    batches stop paying (CPU) — a conservative estimate of one layer's working set."""
    per_token = 4 * (8 * predictor.hidden + 2 * predictor.intermediate + 2 * predictor.heads *
                     max_len)
    if device.startswith("cuda"):
        import torch

        free, _ = torch.cuda.mem_get_info()
        cap = GPU_BATCH_CAP
    else:
        free, cap = _mem_available(), CPU_BATCH_CAP
    return max(1, min(cap, int(free // 4 // (per_token * max_len * 2))))


def _mem_available() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 2 << 30


# ---- the prediction loop ---------------------------------------------------------------

def predict(raw: dict, spec: ModelSpec, *, device: str = "cpu", batch_size: int | None = None,
            progress: bool = True, predictor=None, tokenizer=None) -> tuple[dict, dict]:
    """({question id: answer}, details) for a SQuAD-format document."""
    from transformers import AutoTokenizer

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    start_time = time.perf_counter()
    if device.startswith("cuda"):
        import torch

        torch.cuda.reset_peak_memory_stats()
    tokenizer = tokenizer or AutoTokenizer.from_pretrained(spec.directory)
    if predictor is None:
        predictor = TorchPredictor(spec.directory, device) if spec.backend == "torch" \
            else OnnxPredictor(spec.onnx_path, device)
    settings = spec.settings.for_tokenizer(tokenizer)
    load_s = time.perf_counter() - start_time
    items = items_from_squad(raw)
    t0 = time.perf_counter()
    windows = tokenize(tokenizer, items, settings)
    tokenize_s = time.perf_counter() - t0
    lengths = [len(ids) for ids in windows.input_ids]
    size = batch_size or spec.batch_size or auto_batch_size(predictor, max(lengths, default=1),
                                                            device)
    batches = length_batches(lengths, size)
    starts, ends = [None] * len(windows), [None] * len(windows)
    bar = _progress(len(items), progress)
    t0 = time.perf_counter()
    seen: set[int] = set()
    for batch in batches:
        start, end = predictor(pad(windows, batch, tokenizer.pad_token_id or 0))
        for row, w in enumerate(batch):
            starts[w], ends[w] = start[row, :lengths[w]], end[row, :lengths[w]]
        new = {windows.item_of[w] for w in batch} - seen
        seen |= new
        bar.update(len(new))
    bar.close()
    model_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    answers = decode(windows, items, starts, ends, settings)
    decode_s = time.perf_counter() - t0
    total = time.perf_counter() - start_time
    details = {
        "backend": spec.backend, "device": device, "batch_size": size,
        "fp16": bool(getattr(predictor, "fp16", False)),
        "questions": len(items), "windows": len(windows),
        "tokens": sum(lengths), "padded_tokens": sum(len(b) * lengths[b[0]] for b in batches),
        "padded_tokens_squared": sum(len(b) * lengths[b[0]] ** 2 for b in batches),
        "max_seq_len": settings.max_seq_len, "doc_stride": settings.doc_stride,
        "max_answer_len": settings.max_answer_len,
        "seconds": {"load": round(load_s, 3), "tokenize": round(tokenize_s, 3),
                    "model": round(model_s, 3), "decode": round(decode_s, 3),
                    "total": round(total, 3)},
        "questions_per_s": round(len(items) / max(total - load_s, 1e-9), 2),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }
    if device.startswith("cuda"):
        import torch

        details["peak_gpu_bytes"] = int(torch.cuda.max_memory_allocated())
    return answers, details


def _progress(total: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, unit="q", desc="hf-qa", disable=not enabled, file=sys.stderr,
                mininterval=0.5 if sys.stderr.isatty() else 10.0)


# ---- the runner ------------------------------------------------------------------------

def program_args(spec: ModelSpec, *, model: Path | str, input_path: Path | str,
                 output_path: Path | str, record_path: Path | str, device: str,
                 batch_size: int | None = None) -> list[str]:
    """`-m evaluator.runners.hfqa ...` for this model, as a child process or in a container
    (where the paths are the container's mount points)."""
    argv = ["-m", "evaluator.runners.hfqa", "--model", str(model), "--input", str(input_path),
            "--output", str(output_path), "--device", device, "--record", str(record_path)]
    if spec.backend != "torch":
        argv.append("--int8" if spec.backend == "onnx-int8" else "--onnx")
    for flag, value in (("--batch-size", batch_size or spec.batch_size),
                        ("--max-seq-len", spec.settings.max_seq_len),
                        ("--doc-stride", spec.settings.doc_stride),
                        ("--max-answer-len", spec.settings.max_answer_len)):
        if value is not None:
            argv += [flag, str(value)]
    return argv


class HFQARunner:
    """Runs hf-qa bundles; `subprocess=False` runs in this process (tests, benchmarks)."""

    name = "hf-qa"

    def __init__(self, subprocess: bool = True, batch_size: int | None = None,
                 progress: bool = True):
        self.subprocess = subprocess
        self.batch_size = batch_size
        self.progress = progress

    def run(self, request: RunRequest) -> RunRecord:
        spec = model_spec(request.bundle)
        check_model(spec, request.bundle.id)
        device = pick_device(request.device)
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
        from evaluator.runners.local import _run_with_limit

        bundle = request.bundle
        with tempfile.TemporaryDirectory(prefix=f"qashift-{bundle.id}-") as tmp:
            record_path = Path(tmp) / "record.json"
            argv = [sys.executable, *program_args(
                spec, model=spec.directory, input_path=request.input_path,
                output_path=request.output_path, record_path=record_path, device=device,
                batch_size=self.batch_size)]
            env = {k: v for k, v in os.environ.items()
                   if k in ("PATH", "HOME", "LANG", "LC_ALL", "PYTHONPATH", "VIRTUAL_ENV",
                            "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS")}
            env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TMPDIR": tmp,
                        "PYTHONPATH": str(paths.REPO_ROOT)})
            import shlex

            log_path = Path(tmp) / "log.txt"
            exit_code, wall, peak, timed_out = _run_with_limit(
                shlex.join(argv), Path(tmp), env, log_path, bundle.timeout)
            log = read_tail(log_path)
            details = json.loads(record_path.read_text()) if record_path.is_file() else {}
        if timed_out:
            raise RunFailure("timeout", f"{bundle.id} ran past its {bundle.timeout:g} s time "
                             f"limit and was killed", log)
        if exit_code != 0:
            oom = exit_code in (-9, 137) or "out of memory" in log.lower()
            raise RunFailure("out-of-memory" if oom else "nonzero-exit",
                             f"{bundle.id} exited with status {exit_code}: {last_line(log)}",
                             log)
        return RunRecord(runner=self.name, wall_s=wall, exit_code=0, log=log,
                         peak_memory_bytes=details.get("peak_gpu_bytes", peak),
                         device="gpu" if device.startswith("cuda") else "cpu",
                         details={**details, "in_process": False, "isolated": False})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evaluator.runners.hfqa",
                                     description="Answer a SQuAD-format file with a QA checkpoint.")
    parser.add_argument("--model", required=True, type=Path, help="checkpoint folder")
    parser.add_argument("--input", required=True, type=Path)
    parser.add_argument("--output", required=True, type=Path)
    parser.add_argument("--onnx", action="store_true", help="run onnx/model.onnx")
    parser.add_argument("--int8", action="store_true", help="run onnx/model.int8.onnx")
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda", "auto"))
    parser.add_argument("--max-seq-len", type=int, help="default: min(model maximum, 384)")
    parser.add_argument("--doc-stride", type=int, help="default: min(max-seq-len // 2, 128)")
    parser.add_argument("--max-answer-len", type=int, default=QASettings.max_answer_len)
    parser.add_argument("--record", type=Path, help="write run details (JSON) here")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    backend = "onnx-int8" if args.int8 else "onnx" if args.onnx else "torch"
    spec = ModelSpec(args.model.resolve(), backend, args.batch_size,
                     QASettings(args.max_seq_len, args.doc_stride, args.max_answer_len))
    raw = json.loads(args.input.read_text(encoding="utf-8"))
    device = pick_device(args.device)
    answers, details = predict(raw, spec, device=device, progress=not args.no_progress)
    args.output.write_text(json.dumps(answers, ensure_ascii=False))
    if args.record:
        args.record.write_text(json.dumps(details))
    print(f"hf-qa: {details['questions']} questions, {details['windows']} windows, "
          f"{details['questions_per_s']} q/s ({backend}, {device}, batch {details['batch_size']})",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
