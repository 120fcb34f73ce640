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
- `bidirectional` (the default, the encoder's own regime): every token sees every other, so
  at each step the model re-reads the prompt and the answer so far and predicts the next
  piece at the last position (`generate` does exactly this for a BERT that is not a
  decoder: it keeps no cache). Training draws, for each question it visits, how much of the
  answer is already written (0 to all of it) and learns the next piece.
- `causal` (a BERT decoder, `is_decoder`): the usual language-model training, loss on every
  answer piece at once. The encoder was never trained under a causal mask; on the SQuAD dev
  training half it had not learnt to copy from the passage after 300 steps (F1 under 1).

Hyperparameters: `attention`, `layers` (how many of the encoder's 6 layers are kept),
`epochs`, `learning_rate`, `batch_size`, `max_prompt_len` (training prompts are cut from the
left to this many tokens), `max_answer_len` (answer pieces learnt), `warmup`,
`checkpoint_steps`, `threads`. The loss is on answer pieces and the closing [SEP] only.

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

import numpy as np
import torch
from span_readers import loop, windows
from transformers import AutoModelForCausalLM, AutoTokenizer

PLACEHOLDER = re.compile(r"\{(\w+)\}")
MAX_SHARD = "45MB"  # no stored file over 50 MB


def render(template: str, context: str, question: str) -> str:
    """The template with {context} and {question} filled in, in one pass (as the service)."""
    values = {"context": context, "question": question}
    return PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), template)


def examples(doc: dict, template: str, tokenizer, max_prompt: int,
             max_answer: int) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, answer ids) per answered question: [CLS] prompt [SEP] and answer [SEP]."""
    tokenizer.truncation_side = "left"
    out = []
    for article in doc["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                if not qa.get("answers"):
                    continue
                prompt = tokenizer(render(template, paragraph["context"], qa["question"]),
                                   truncation=True, max_length=max_prompt)["input_ids"]
                answer = tokenizer(qa["answers"][0]["text"],
                                   add_special_tokens=False)["input_ids"][:max_answer]
                out.append((prompt, answer + [tokenizer.sep_token_id]))
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


def causal_loss(model, chosen: list[tuple[list[int], list[int]]], pad: int) -> torch.Tensor:
    """The language-model loss on every answer piece (each predicted from the position
    before it), with the vocabulary projection applied at those positions only: most
    positions are prompt, and the projection is half the model's work."""
    ids, mask = padded([prompt + answer for prompt, answer in chosen], pad)
    targets = torch.full_like(ids, -100)
    for row, (prompt, answer) in enumerate(chosen):
        targets[row, len(prompt):len(prompt) + len(answer)] = torch.tensor(answer)
    ids, mask, targets = ids.to(model.device), mask.to(model.device), targets.to(model.device)
    hidden = model.bert(input_ids=ids, attention_mask=mask).last_hidden_state
    keep = targets[:, 1:] != -100
    return torch.nn.functional.cross_entropy(model.cls(hidden[:, :-1][keep]),
                                             targets[:, 1:][keep])


def next_piece_loss(model, chosen: list[tuple[list[int], list[int]]], pad: int,
                    rng: random.Random) -> torch.Tensor:
    """Each question with a drawn part of its answer already written: the loss of the next
    piece, predicted at the last position with every token seeing every other (as
    `generate` runs a BERT that is not a decoder)."""
    rows, targets = [], []
    for prompt, answer in chosen:
        written = rng.randrange(len(answer))
        rows.append(prompt + answer[:written])
        targets.append(answer[written])
    ids, mask = padded(rows, pad)
    ids, mask = ids.to(model.device), mask.to(model.device)
    hidden = model.bert(input_ids=ids, attention_mask=mask).last_hidden_state
    last = hidden[torch.arange(len(rows), device=model.device), mask.sum(1) - 1]
    return torch.nn.functional.cross_entropy(model.cls(last),
                                             torch.tensor(targets, device=model.device))


def length_batches(items: list[tuple[list[int], list[int]]], size: int,
                   rng: random.Random) -> list[list[int]]:
    """Batches of similar length (little padding), in a shuffled order."""
    order = sorted(range(len(items)), key=lambda k: (len(items[k][0]), rng.random()))
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
    model = AutoModelForCausalLM.from_pretrained(
        windows.encoder_dir(), is_decoder=causal, num_hidden_layers=int(hp["layers"])).to(device)
    items = examples(json.load(open(args.train)), config["prompt"]["template"], tokenizer,
                     int(hp["max_prompt_len"]), int(hp["max_answer_len"]))
    size, epochs = int(hp["batch_size"]), int(hp["epochs"])
    order_rng, draws = random.Random(seed), random.Random(seed + 1)
    plan = [b for _ in range(epochs) for b in length_batches(items, size, order_rng)]
    total = len(plan)
    optimizer = torch.optim.AdamW(model.parameters(), lr=float(hp["learning_rate"]),
                                  weight_decay=0.01)
    warm = max(1, int(total * float(hp["warmup"])))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warm, max(0.0, (total - s) / max(1, total - warm))))
    checkpoints = Path(args.checkpoints)
    checkpoint = checkpoints / "checkpoint.pt"
    step = 0
    if checkpoint.exists():
        state = torch.load(checkpoint, weights_only=False)
        model.load_state_dict(state["model"])
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
    started, losses, first = time.monotonic(), [], step
    while step < total:
        chosen = [items[i] for i in plan[step]]
        loss = causal_loss(model, chosen, tokenizer.pad_token_id) if causal else \
            next_piece_loss(model, chosen, tokenizer.pad_token_id, draws)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
        step += 1
        if step % every == 0 or step == total:
            loop.save_atomic({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                              "schedule": schedule.state_dict(), "step": step,
                              "draws": draws.getstate(), **loop.rng_state()}, checkpoint)
            mean = sum(losses[-every:]) / len(losses[-every:])
            eta = (time.monotonic() - started) / (step - first) * (total - step)
            loop.write_progress(checkpoints, {"epoch": round(step * epochs / total, 2),
                                              "epochs": epochs, "step": step, "steps": total,
                                              "loss": mean, "eta_s": eta})
            print(f"step {step}/{total} loss {mean:.4f}", flush=True)
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
