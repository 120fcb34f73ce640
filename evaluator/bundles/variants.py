"""Variants of a bundle asked for on the command line: a generative bundle under another
prompt template (`evaluate --template`), an hf-qa bundle with other run settings
(`--model-args`). Each variant's settings enter its digest, so its cells are its own."""

from __future__ import annotations

from dataclasses import replace

from evaluator.bundles.spec import Bundle
from evaluator.core.errors import UserError
from evaluator.core.hashing import sha256_bytes
from evaluator.qa.prompting import PromptSpec


def with_template(bundle: Bundle, template: str) -> Bundle:
    """A generative bundle answering under another prompt template (`evaluate --template`):
    a variant with its own id (`ID+p` and the template's hash) and its own cells, the
    template part of its digest."""
    if bundle.kind != "generative":
        raise UserError(f"--template applies to generative bundles; {bundle.id} is a "
                        f"{bundle.kind} bundle")
    prompt = {**bundle.generative["prompt"], "template": template}
    try:
        PromptSpec(**prompt)
    except ValueError as exc:
        raise UserError(f"--template {template!r}: {exc}") from None
    tag = sha256_bytes(template.encode())[:8]
    return replace(bundle, id=f"{bundle.id}+p{tag}",
                   generative={**bundle.generative, "prompt": prompt},
                   model_args={**bundle.model_args, "prompt.template": template})


MODEL_ARGS = {"batch_size": int, "max_seq_len": int, "doc_stride": int, "max_answer_len": int,
              "onnx": (bool, str)}
QA_ARGS = ("max_seq_len", "doc_stride", "max_answer_len")


def with_model_args(bundle: Bundle, args: dict) -> Bundle:
    """An hf-qa bundle with run settings overridden (`evaluate --model-args`); the settings
    enter its digest, so such a run is its own cell, never the default run's cache."""
    if not args:
        return bundle
    if bundle.kind != "hf-qa":
        raise UserError(f"--model-args applies to hf-qa bundles; {bundle.id} is a "
                        f"{bundle.kind} bundle")
    for key, value in args.items():
        if key not in MODEL_ARGS:
            raise UserError(f"--model-args: unknown key {key!r}; known: {', '.join(MODEL_ARGS)}")
        ok = (value in (True, False, "int8")) if key == "onnx" else \
            (isinstance(value, int) and not isinstance(value, bool) and value > 0)
        if not ok:
            want = "true, false or int8" if key == "onnx" else "a positive integer"
            raise UserError(f"--model-args: {key}={value!r} must be {want}")
    model = {**bundle.model, **{k: v for k, v in args.items() if k not in QA_ARGS}}
    qa = {**(bundle.model.get("qa") or {}), **{k: v for k, v in args.items() if k in QA_ARGS}}
    if qa:
        model["qa"] = qa
    if model.get("onnx") is False:
        model.pop("onnx")
    return replace(bundle, model=model, model_args=dict(sorted(args.items())))
