"""Answer a SQuAD-format document with a generative Transformers model (causal or
sequence-to-sequence), greedily, in batches of prompts of the same length in tokens.

A batch holds prompts of equal length only, so nothing is padded: a model whose positions do
not follow the attention mask (BERT's absolute positions, say) answers a prompt in a batch as
it answers it alone, and as a server asked one question at a time answers it. The KV cache is
used as generation goes. A prompt longer than the model's window loses its start (the
question, at the end, is kept). The generated text is cut at the
first stop string and the answer extracted by the bundle's rule (`evaluator.qa.prompting`).
This module imports nothing else of the project but `evaluator.qa`.
"""

from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

from evaluator.qa.prompting import GenerationSpec, Prompted, answers

CPU_BATCH = 8
GPU_BATCH = 64


def generate(items: list[Prompted], directory: Path, spec: GenerationSpec,
             device: str = "cpu", progress: bool = True) -> tuple[dict, dict, dict]:
    """({id: answer}, {id: {"generation", "answer"}}, run details) for prompted questions."""
    import torch  # lazy: heavy, for model code only
    from transformers import (  # lazy: heavy, for model code only
        AutoConfig,
        AutoModelForCausalLM,
        AutoModelForSeq2SeqLM,
        AutoTokenizer,
    )

    started = time.perf_counter()
    config = AutoConfig.from_pretrained(directory)
    seq2seq = bool(getattr(config, "is_encoder_decoder", False))
    tokenizer = AutoTokenizer.from_pretrained(directory)
    tokenizer.truncation_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.sep_token
    loader = AutoModelForSeq2SeqLM if seq2seq else AutoModelForCausalLM
    model = loader.from_pretrained(directory).eval().to(device)
    window = _window(config, tokenizer) - (0 if seq2seq else spec.max_new_tokens)
    if window <= 8:
        raise ValueError(f"the model's window leaves no room for a prompt and "
                         f"{spec.max_new_tokens} new tokens")
    encoded = [tokenizer(x.prompt, truncation=True, max_length=window)["input_ids"]
               for x in items]
    cap = spec.batch_size or (GPU_BATCH if device.startswith("cuda") else CPU_BATCH)
    batches = _equal_length_batches([len(ids) for ids in encoded], cap)
    texts = {}
    with torch.inference_mode():
        for done, batch in enumerate(batches):
            ids = torch.tensor([encoded[k] for k in batch], device=device)
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                 max_new_tokens=spec.max_new_tokens, do_sample=False,
                                 num_beams=1, use_cache=True,
                                 pad_token_id=tokenizer.pad_token_id)
            new = out if seq2seq else out[:, ids.shape[1]:]
            for k, text in zip(batch, tokenizer.batch_decode(new, skip_special_tokens=True),
                               strict=True):
                texts[items[k].id] = text
            if progress and (done % 20 == 0 or done == len(batches) - 1):
                print(f"generated {sum(map(len, batches[:done + 1]))}/{len(items)}",
                      file=sys.stderr)
    found, generations = answers({x.id: texts[x.id] for x in items}, spec)
    wall = time.perf_counter() - started
    details = {"questions": len(items), "batch_size": cap, "batches": len(batches),
               "seq2seq": seq2seq, "window": window,
               "truncated": sum(len(ids) >= window for ids in encoded),
               "questions_per_s": round(len(items) / wall, 2) if wall else None,
               "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    return found, generations, details


def _equal_length_batches(lengths: list[int], cap: int) -> list[list[int]]:
    """Indices grouped by length, at most `cap` to a group, shortest first."""
    by_length: dict[int, list[int]] = {}
    for k, n in enumerate(lengths):
        by_length.setdefault(n, []).append(k)
    return [group[i:i + cap] for n in sorted(by_length) for group in [by_length[n]]
            for i in range(0, len(group), cap)]


def _window(config, tokenizer) -> int:
    """The longest input the model takes, in tokens."""
    for name in ("max_position_embeddings", "n_positions", "max_seq_len"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    limit = getattr(tokenizer, "model_max_length", 0)
    return limit if 0 < limit < 1_000_000 else 512
