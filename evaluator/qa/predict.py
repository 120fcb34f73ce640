"""Answer a SQuAD-format document with a Transformers extractive-QA checkpoint or its ONNX
export, faster than `transformers.pipeline("question-answering")` and with its answers (see
`evaluator.qa.decode` for the decoding rules).

Speed comes from tokenizing everything at once, batching windows of similar length with
dynamic padding, ONNX Runtime (optionally int8), and fp16 on CUDA. This package imports
nothing else of the project: it is the only code mounted into containers.
"""

from __future__ import annotations

import inspect
import json
import os
import resource
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from evaluator.qa.decode import QASettings, decode, items_from_squad, length_batches, pad, tokenize

ONNX_FILES = {"fp32": "model.onnx", "int8": "model.int8.onnx"}
ONNX_DIR = "onnx"
CPU_BATCH_CAP = 32
GPU_BATCH_CAP = 256
PROGRAM = "evaluator.qa"  # `python -m evaluator.qa ...`: the in-container program


class NoCUDA(RuntimeError):
    """A GPU was asked for and CUDA is not available."""


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


# ---- predictors: one batch of padded arrays in, start/end logits out --------------------

class TorchPredictor:
    def __init__(self, directory: Path, device: str = "cpu", fp16: bool | None = None):
        import torch  # lazy: heavy, for model code only
        from transformers import AutoModelForQuestionAnswering  # lazy: heavy, for model code only

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
        import onnxruntime as ort  # lazy: only the ONNX backend needs it

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
        import torch  # lazy: heavy, for model code only

        if torch.cuda.is_available():
            return "cuda"
    except ImportError:
        pass
    if requested in ("gpu", "cuda"):
        raise NoCUDA("a GPU was requested but CUDA is not available")
    return "cpu"


def auto_batch_size(predictor, max_len: int, device: str) -> int:
    """Largest batch whose activations fit in a quarter of free memory, capped where bigger
    batches stop paying (CPU) — a conservative estimate of one layer's working set."""
    per_token = 4 * (8 * predictor.hidden + 2 * predictor.intermediate + 2 * predictor.heads *
                     max_len)
    if device.startswith("cuda"):
        import torch  # lazy: heavy, for model code only

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
    from transformers import AutoTokenizer  # lazy: heavy, for model code only

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    start_time = time.perf_counter()
    if device.startswith("cuda"):
        import torch  # lazy: heavy, for model code only

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
        import torch  # lazy: heavy, for model code only

        details["peak_gpu_bytes"] = int(torch.cuda.max_memory_allocated())
    return answers, details


def _progress(total: int, enabled: bool):
    from tqdm import tqdm  # lazy: only a prediction run shows progress

    return tqdm(total=total, unit="q", desc="hf-qa", disable=not enabled, file=sys.stderr,
                mininterval=0.5 if sys.stderr.isatty() else 10.0)


def program_args(spec: ModelSpec, *, model: Path | str, input_path: Path | str,
                 output_path: Path | str, record_path: Path | str, device: str,
                 batch_size: int | None = None) -> list[str]:
    """`-m evaluator.qa ...` for this model, as a child process or in a container
    (where the paths are the container's mount points)."""
    argv = ["-m", PROGRAM, "--model", str(model), "--input", str(input_path),
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


