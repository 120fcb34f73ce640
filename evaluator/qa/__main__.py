"""The QA program: `python -m evaluator.qa --model DIR --input IN --output OUT [--onnx|--int8]
[--batch-size N] [--device cpu|cuda|auto] [--record RECORD.json]`, run as a child process by
the local hf-qa runner and inside the standard runner image by the Docker runner. With
`--generative CONFIG.json` (prompt, demonstrations, decoding) the model is a generative one
and `--generations` receives each question's generation beside its extracted answer."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from evaluator.qa import prompting
from evaluator.qa.decode import QASettings
from evaluator.qa.generate import generate
from evaluator.qa.predict import PROGRAM, ModelSpec, pick_device, predict


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {PROGRAM}",
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
    parser.add_argument("--generative", type=Path, help="a generative model: its config JSON")
    parser.add_argument("--generations", type=Path, help="with --generative: write each "
                        "question's generation and answer here")
    args = parser.parse_args(argv)
    if args.generative:
        return _generative(args)
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


def _generative(args: argparse.Namespace) -> int:
    config = json.loads(args.generative.read_text(encoding="utf-8"))
    raw = json.loads(args.input.read_text(encoding="utf-8"))
    device = pick_device(args.device)
    answers, generations, details = generate(prompting.prompted(raw, config),
                                             args.model.resolve(),
                                             prompting.generation_spec(config), device,
                                             progress=not args.no_progress)
    args.output.write_text(json.dumps(answers, ensure_ascii=False))
    if args.generations:
        args.generations.write_text(json.dumps(generations, ensure_ascii=False))
    if args.record:
        args.record.write_text(json.dumps(details))
    print(f"generative: {details['questions']} questions, {details['questions_per_s']} q/s "
          f"({device}, batch {details['batch_size']})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
