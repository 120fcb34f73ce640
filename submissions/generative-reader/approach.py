"""A generative reader: all-MiniLM-L6-v2 (Wang et al. 2020) loaded as a BERT language model
(`AutoModelForCausalLM` maps a BERT config to `BertLMHeadModel`) and fine-tuned to write the
answer after the prompt it will be asked with, one word piece at a time, then [SEP].

    python3 approach.py train --train TRAIN.json --config CONFIG.json --model DIR --checkpoints DIR

There is no predict command: the weights folder is a Transformers model (config, weights,
tokenizer, a generation config whose end token is [SEP]) that the service runs as a
generative bundle under the approach's `prompt:` and `generation:`, locally, in a container
or behind any OpenAI-compatible server. The training config carries that prompt, so the
system learns on exactly the prompts it answers: the template filled in with each training
question, tokenized as the service tokenizes it ([CLS] prompt [SEP], cut from the left).

`attention` says how the model reads:
- `causal` (the default; a BERT decoder, `is_decoder`): the usual language-model training,
  loss on every answer piece at once; generation keeps a cache. The default prompt puts the
  question before the passage, so passage tokens see the question.
- `bidirectional` (the encoder's own regime): every token sees every other, so at each step
  the model re-reads the prompt and the answer so far and predicts the next piece at the
  last position (`generate` does exactly this for a BERT that is not a decoder: it keeps no
  cache). Training draws, for each question it visits, how much of the answer is already
  written (0 to all of it) and learns the next piece.

Copying is taught, not hoped for: a language-model loss alone did not learn to copy from
the passage on the SQuAD dev training half (F1 under 3 after 700 steps). Two training-only
losses guide it (docs/generative.md): `copy_attention` weighs a loss that teaches every head
of the last layer, at each position that names an answer piece, to look at the passage token
holding that piece; `span_loss` weighs a span reader's start/end loss from a linear head on
the states that layer attends over (the head is not saved). Either at 0 leaves it out.

Hyperparameters: `attention`, `layers` (how many of the encoder's 6 layers are kept),
`epochs`, `learning_rate`, `batch_size`, `max_prompt_len` (training prompts are cut from the
left to this many tokens), `max_answer_len` (answer pieces learnt), `warmup`,
`copy_attention`, `span_loss`, `checkpoint_steps`, `threads`. The answer loss is on answer
pieces and the closing [SEP] only.

Checkpoints (weights, optimizer, schedule, every RNG state, the step) are saved every
`checkpoint_steps` steps; a killed run resumes from the last. The stored weights are float16
(the config says float32, so every loader computes in float32 from the same rounded values).
"""

import argparse
import json
import os
import random
import re
import sys
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from span_readers import loop, windows
from transformers import AutoModelForCausalLM, AutoTokenizer

PLACEHOLDER = re.compile(r"\{(\w+)\}")
MAX_SHARD = "45MB"  # no stored file over 50 MB


class Example(NamedTuple):
    prompt: list[int]
    answer: list[int]  # the answer's pieces and the closing [SEP]
    copies: list[int]  # per answer piece, the prompt position holding it, or -1
    span: tuple[int, int]  # the prompt positions of the answer's first and last piece, or -1s


def render(template: str, context: str, question: str) -> str:
    """The template with {context} and {question} filled in, in one pass (as the service)."""
    values = {"context": context, "question": question}
    return PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), template)


def context_offset(template: str, context: str, question: str) -> int | None:
    """Where the context starts in the rendered prompt (None when the template has none)."""
    if "{context}" not in template:
        return None
    return len(render(template[:template.index("{context}")], context, question))


def examples(doc: dict, template: str, tokenizer, max_prompt: int,
             max_answer: int) -> list[Example]:
    """Per answered question: [CLS] prompt [SEP], the answer's pieces then [SEP], and for each
    answer piece the prompt position it copies (-1 where the passage's own tokenization of the
    gold span differs, the span was cut off, or the piece is the closing [SEP])."""
    tokenizer.truncation_side = "left"
    out = []
    for article in doc["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                if not qa.get("answers"):
                    continue
                gold = qa["answers"][0]
                encoded = tokenizer(render(template, paragraph["context"], qa["question"]),
                                    truncation=True, max_length=max_prompt,
                                    return_offsets_mapping=True)
                prompt = encoded["input_ids"]
                answer = tokenizer(gold["text"], add_special_tokens=False)["input_ids"][:max_answer]
                where = [-1] * (len(answer) + 1)
                start = context_offset(template, paragraph["context"], qa["question"])
                if start is not None:
                    begin = start + int(gold["answer_start"])
                    end = begin + len(gold["text"])
                    span = [k for k, (a, b) in enumerate(encoded["offset_mapping"])
                            if b > a and a < end and b > begin]
                    for piece, (k, token) in enumerate(zip(span, answer)):
                        if prompt[k] == token:
                            where[piece] = k
                ends = (span[0], span[-1]) if start is not None and span else (-1, -1)
                out.append(Example(prompt, answer + [tokenizer.sep_token_id], where, ends))
    return out


def padded(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids and their attention mask."""
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for row, tokens in enumerate(rows):
        ids[row, :len(tokens)] = torch.tensor(tokens)
        mask[row, :len(tokens)] = 1
    return ids, mask


def copy_loss(attentions: tuple[torch.Tensor, ...], rows: list[int], queries: list[int],
              copies: list[int]) -> torch.Tensor:
    """Supervised copying: every attention head of the last layer, at each position that
    predicts an answer piece, is taught to look at the prompt position holding that piece
    (pieces with no such position are left out), so that layer can carry the whole state of
    that position, token and all, to where the next piece is named."""
    keep = [k for k, where in enumerate(copies) if where >= 0]
    probs = attentions[-1]
    if not keep:
        return probs.sum() * 0.0
    looked = probs[[rows[k] for k in keep], :, [queries[k] for k in keep],
                   [copies[k] for k in keep]]
    return -torch.log(looked.clamp_min(1e-9)).mean()


def span_loss(locator: torch.nn.Linear, hidden: torch.Tensor,
              chosen: list[Example]) -> torch.Tensor:
    """A span reader's loss on the prompt positions (start and end of the gold answer), read
    from the states the last layer attends over: a training-only head that teaches the
    encoder where answers are before the reading head looks; it is not saved."""
    logits = locator(hidden).float()
    prompt_len = torch.tensor([len(item.prompt) for item in chosen], device=hidden.device)
    outside = torch.arange(hidden.shape[1], device=hidden.device)[None, :] >= prompt_len[:, None]
    logits = logits.masked_fill(outside[:, :, None], -1e4)
    keep = [row for row, item in enumerate(chosen) if item.span[0] >= 0]
    if not keep:
        return logits.sum() * 0.0
    spans = torch.tensor([chosen[row].span for row in keep], device=hidden.device)
    picked = logits[keep]
    return (torch.nn.functional.cross_entropy(picked[:, :, 0], spans[:, 0])
            + torch.nn.functional.cross_entropy(picked[:, :, 1], spans[:, 1])) / 2


def losses(model, locator: torch.nn.Linear, chosen: list[Example], pad: int, causal: bool,
           rng: random.Random, copying: bool) -> dict[str, torch.Tensor]:
    """The step's losses: `answer` (the next piece), `copy` (where the last layer looks,
    when copying is supervised) and `span` (the training-only span head).

    Causal: the language-model loss on every answer piece, each predicted from the position
    before it. Bidirectional: each question with a drawn part of its answer already written,
    the next piece predicted at the last position with every token seeing every other (as
    `generate` runs a BERT that is not a decoder). Either way the vocabulary projection is
    applied at the predicting positions only: it is half the model's work."""
    rows, queries, copies, targets = [], [], [], []
    for row, item in enumerate(chosen):
        if causal:
            pieces = range(len(item.answer))
            written = len(item.answer)
        else:
            written = rng.randrange(len(item.answer))
            pieces = [written]
        rows.append(item.prompt + item.answer[:written])
        for piece in pieces:
            queries.append((row, len(item.prompt) - 1 + piece))
            copies.append(item.copies[piece])
            targets.append(item.answer[piece])
    ids, mask = padded(rows, pad)
    out = model.bert(input_ids=ids.to(model.device), attention_mask=mask.to(model.device),
                     output_attentions=copying, output_hidden_states=True)
    at_rows = [row for row, _ in queries]
    at = [position for _, position in queries]
    found = {"answer": torch.nn.functional.cross_entropy(
        model.cls(out.last_hidden_state[at_rows, at]),
        torch.tensor(targets, device=model.device))}
    if copying:
        found["copy"] = copy_loss(out.attentions, at_rows, at, copies)
    found["span"] = span_loss(locator, out.hidden_states[-2], chosen)
    return found


def length_batches(items: list[Example], size: int,
                   rng: random.Random) -> list[list[int]]:
    """Batches of similar length (little padding), in a shuffled order."""
    order = sorted(range(len(items)), key=lambda k: (len(items[k].prompt), rng.random()))
    chunks = [order[b:b + size] for b in range(0, len(order), size)]
    rng.shuffle(chunks)
    return chunks


def train(args: argparse.Namespace) -> int:
    config = json.load(open(args.config))
    hp, seed = config["hyperparameters"], int(config["seed"])
    device = config.get("device", "cpu")
    loop.set_threads(int(hp.get("threads", 0)))
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    tokenizer = AutoTokenizer.from_pretrained(windows.encoder_dir())
    causal = hp["attention"] == "causal"
    weights = {"answer": 1.0, "copy": float(hp["copy_attention"]),
               "span": float(hp["span_loss"])}
    model = AutoModelForCausalLM.from_pretrained(
        windows.encoder_dir(), is_decoder=causal, num_hidden_layers=int(hp["layers"]),
        attn_implementation="eager" if weights["copy"] > 0 else None,
        attention_probs_dropout_prob=0.0).to(device)  # the copy loss reads the probabilities
    locator = torch.nn.Linear(model.config.hidden_size, 2).to(device)
    items = examples(json.load(open(args.train)), config["prompt"]["template"], tokenizer,
                     int(hp["max_prompt_len"]), int(hp["max_answer_len"]))
    size, epochs = int(hp["batch_size"]), int(hp["epochs"])
    order_rng, draws = random.Random(seed), random.Random(seed + 1)
    plan = [b for _ in range(epochs) for b in length_batches(items, size, order_rng)]
    total = len(plan)
    optimizer = torch.optim.AdamW([*model.parameters(), *locator.parameters()],
                                  lr=float(hp["learning_rate"]), weight_decay=0.01)
    warm = max(1, int(total * float(hp["warmup"])))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warm, max(0.0, (total - s) / max(1, total - warm))))
    checkpoints = Path(args.checkpoints)
    checkpoint = checkpoints / "checkpoint.pt"
    step = 0
    if checkpoint.exists():
        state = torch.load(checkpoint, weights_only=False)
        model.load_state_dict(state["model"])
        locator.load_state_dict(state["locator"])
        optimizer.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        step = state["step"]
        draws.setstate(state["draws"])
        random.setstate(state["python_rng"])
        np.random.set_state(state["numpy_rng"])
        torch.set_rng_state(state["torch_rng"])
        print(f"resuming at step {step} of {total}", flush=True)
    every = int(hp["checkpoint_steps"])
    model.train()
    started, history, first = time.monotonic(), [], step
    while step < total:
        chosen = [items[i] for i in plan[step]]
        parts = losses(model, locator, chosen, tokenizer.pad_token_id, causal, draws,
                       weights["copy"] > 0)
        loss = sum(weights[name] * value for name, value in parts.items())
        loss.backward()
        torch.nn.utils.clip_grad_norm_([*model.parameters(), *locator.parameters()], 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        history.append({name: float(value.detach()) for name, value in parts.items()})
        step += 1
        if step % every == 0 or step == total:
            loop.save_atomic({"model": model.state_dict(), "locator": locator.state_dict(),
                              "optimizer": optimizer.state_dict(),
                              "schedule": schedule.state_dict(), "step": step,
                              "draws": draws.getstate(), **loop.rng_state()}, checkpoint)
            recent = history[-every:]
            mean = {name: round(sum(h[name] for h in recent) / len(recent), 4)
                    for name in recent[0]}
            eta = (time.monotonic() - started) / (step - first) * (total - step)
            loop.write_progress(checkpoints, {"epoch": round(step * epochs / total, 2),
                                              "epochs": epochs, "step": step, "steps": total,
                                              "loss": mean["answer"], "losses": mean,
                                              "eta_s": eta})
            print(f"step {step}/{total} loss {mean['answer']:.4f} ("
                  + ", ".join(f"{name} {value:.4f}" for name, value in mean.items()) + ")",
                  flush=True)
    save(model.eval(), tokenizer, Path(args.model))
    return 0


def save(model, tokenizer, folder: Path) -> None:
    """A Transformers folder any loader runs: float16 weights read as float32, the
    tokenizer, and generation ending at [SEP]."""
    model.generation_config.eos_token_id = tokenizer.sep_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.to(torch.float16).save_pretrained(folder, max_shard_size=MAX_SHARD)
    tokenizer.save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    config["dtype"] = "float32"
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> int:
    args = loop.arguments(sys.argv[1:] if argv is None else argv)
    if args.command != "train":
        print("this approach's systems are generative bundles: the service runs them",
              file=sys.stderr)
        return 2
    return train(args)


if __name__ == "__main__":
    sys.exit(main())
