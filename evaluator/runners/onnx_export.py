"""Export an extractive-QA checkpoint to ONNX (dynamic batch and sequence axes), check that
ONNX Runtime gives the same answers as PyTorch on a sample, and optionally quantise it to
dynamic int8 for faster CPU inference (its accuracy cost is measured, not assumed).

Files land next to the checkpoint, in `<checkpoint>/onnx/`: `model.onnx`, `model.int8.onnx`
and `export.json` (versions, hashes, the agreement found on the sample).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from evaluator.core.errors import UserError
from evaluator.data.fetch import sha256_of
from evaluator.data.testsets import first_questions
from evaluator.qa.predict import ModelSpec, predict

INPUTS = ("input_ids", "attention_mask", "token_type_ids")
OUTPUTS = ("start_logits", "end_logits")
OPSET = 17
MIN_AGREEMENT = 0.99  # fp32 ONNX vs PyTorch; only float-rounding near-ties may differ


@dataclass
class ExportReport:
    directory: str
    onnx: str
    int8: str | None = None
    seconds: float = 0.0
    sample_questions: int = 0
    agreement: float | None = None  # fp32 ONNX answers equal to PyTorch's, fraction
    int8_agreement: float | None = None
    files: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def export(model_dir: Path, *, int8: bool = False, sample: dict | None = None,
           sample_size: int = 200, opset: int = OPSET) -> ExportReport:
    """Write `<model_dir>/onnx/model.onnx` (and `model.int8.onnx` if asked) and check them.

    `sample` is a SQuAD-format document; its first `sample_size` questions are answered by
    PyTorch and by ONNX Runtime, and the fp32 export must agree on >= 99% of them.
    """
    import torch  # lazy: heavy, for model code only
    from transformers import (  # lazy: heavy, for model code only
        AutoModelForQuestionAnswering,
        AutoTokenizer,
    )

    start = time.perf_counter()
    model_dir = Path(model_dir)
    out_dir = model_dir / "onnx"
    out_dir.mkdir(exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    # Eager attention traces to plain MatMul/Softmax, which ONNX Runtime fuses and quantises.
    model = AutoModelForQuestionAnswering.from_pretrained(
        model_dir, attn_implementation="eager").eval()
    names = [n for n in INPUTS if n in tokenizer.model_input_names or n == "input_ids"]
    example = tokenizer(["a question", "another, longer question"],
                        ["some context", "and some longer context to pad"],
                        padding=True, return_tensors="pt")
    args = tuple(example[n] for n in names)
    onnx_path = out_dir / "model.onnx"
    dynamic = {n: {0: "batch", 1: "sequence"} for n in (*names, *OUTPUTS)}

    class Logits(torch.nn.Module):  # a tuple of two tensors, whatever the model returns
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *inputs):
            out = self.inner(**dict(zip(names, inputs)))
            return out.start_logits, out.end_logits

    with torch.inference_mode():
        torch.onnx.export(Logits(model), args, str(onnx_path), input_names=names,
                          output_names=list(OUTPUTS), dynamic_axes=dynamic,
                          opset_version=opset, dynamo=False)
    report = ExportReport(str(model_dir), str(onnx_path))
    if int8:
        from onnxruntime.quantization import (  # lazy: only the ONNX backend needs it
            QuantType,
            quantize_dynamic,
        )

        int8_path = out_dir / "model.int8.onnx"
        quantize_dynamic(str(onnx_path), str(int8_path), weight_type=QuantType.QInt8)
        report.int8 = str(int8_path)
    if sample is not None:
        report.sample_questions, report.agreement, report.int8_agreement = \
            _check(model_dir, sample, sample_size, int8)
        if report.agreement < MIN_AGREEMENT:
            raise UserError(f"ONNX export of {model_dir} answers differently from PyTorch on "
                            f"{1 - report.agreement:.1%} of {report.sample_questions} sample "
                            f"questions; not using it")
    report.seconds = round(time.perf_counter() - start, 1)
    import onnxruntime  # lazy: only the ONNX backend needs it

    report.files = {p.name: sha256_of(p) for p in sorted(out_dir.glob("*.onnx"))}
    meta = {**report.to_dict(), "opset": opset, "torch": torch.__version__,
            "onnxruntime": onnxruntime.__version__}
    (out_dir / "export.json").write_text(json.dumps(meta, indent=2) + "\n")
    return report


def _check(model_dir: Path, sample: dict, size: int,
           int8: bool) -> tuple[int, float, float | None]:
    """Answer the first `size` questions of `sample` with each backend; fractions equal."""
    small = first_questions(sample, size)
    kwargs = {"progress": False, "batch_size": 16}
    reference, _ = predict(small, ModelSpec(model_dir, "torch"), **kwargs)
    onnx, _ = predict(small, ModelSpec(model_dir, "onnx"), **kwargs)
    n = len(reference)
    agree = sum(onnx[k] == v for k, v in reference.items()) / max(n, 1)
    agree_int8 = None
    if int8:
        quant, _ = predict(small, ModelSpec(model_dir, "onnx-int8"), **kwargs)
        agree_int8 = sum(quant[k] == v for k, v in reference.items()) / max(n, 1)
    return n, agree, agree_int8
