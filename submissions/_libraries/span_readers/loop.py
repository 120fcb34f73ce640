"""The train and predict commands every reader shares.

    python3 approach.py train --train TRAIN.json --config CONFIG.json --model DIR --checkpoints DIR
    python3 approach.py predict --model DIR INPUT.json OUTPUT.json

Training: seeded, batches of similar passage length in shuffled order, Adamax or Adam,
gradient clipping; after each epoch a checkpoint (weights, optimizer, every RNG state, the
epoch) and `progress.json`, so a killed run resumes from the last epoch. The frozen model is
`reader.safetensors` (float16, see `frozen`) plus `reader.json` (the hyperparameters and what
the data decided: feature width, tuned words, character vocabulary) and, with
`contextual: true`, `encoder.json`, the reference to the pinned encoder whose states the
reader reads. Training runs on the config's device; prediction on the CPU.
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
from torch import nn

from span_readers import frozen, prepared, text, windows

WEIGHTS = "reader.safetensors"


def set_threads(threads: int) -> None:
    """`threads` torch threads; 0: one per CPU this process may run on (its affinity)."""
    torch.set_num_threads(threads or len(os.sched_getaffinity(0)))


def save_atomic(obj, path: Path) -> None:
    torch.save(obj, str(path) + ".partial")
    os.replace(str(path) + ".partial", path)


def write_progress(folder: Path, doc: dict) -> None:
    (folder / "progress.json.partial").write_text(json.dumps(doc))
    os.replace(folder / "progress.json.partial", folder / "progress.json")


def length_batches(data: list[dict], size: int) -> list[list[int]]:
    """Batches of similar passage length (little padding) in a shuffled order."""
    order = sorted(range(len(data)), key=lambda k: (len(data[k]["p"].words), random.random()))
    chunks = [order[b:b + size] for b in range(0, len(order), size)]
    random.shuffle(chunks)
    return chunks


def rng_state() -> dict:
    return {"python_rng": random.getstate(), "numpy_rng": np.random.get_state(),
            "torch_rng": torch.get_rng_state()}


def restore_rng(state: dict) -> None:
    random.setstate(state["python_rng"])
    np.random.set_state(state["numpy_rng"])
    torch.set_rng_state(state["torch_rng"])


def train(reader: type[nn.Module], args: argparse.Namespace) -> int:
    config = json.load(open(args.config))
    hp, seed = config["hyperparameters"], int(config["seed"])
    set_threads(int(hp.get("threads", 0)))
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    raw = json.load(open(args.train))
    chars = text.char_vocabulary(raw) if hp.get("char_filters") else {}
    tags, contextual = bool(hp.get("features", True)), bool(hp.get("contextual"))
    encoder = frozen.encoder_reference() if contextual else None
    data = text.examples(raw, parsed(args.train, raw, args.prepared, tags, encoder), chars,
                         tags, int(hp["max_passage"]), True)
    tuned = text.tuned_words(data, int(hp.get("tune_top", 0)))
    spec = {**hp, "feature_width": text.features_width(tags), "tuned": len(tuned),
            "n_chars": len(chars) + 2}
    if contextual:
        spec["contextual_size"] = int(data[0]["p"].context.shape[1])
    device = config.get("device", "cpu")
    model = reader(spec).to(device)
    kind = {"adamax": torch.optim.Adamax, "adam": torch.optim.Adam}[hp.get("optimizer",
                                                                           "adamax")]
    optimizer = kind(model.parameters(), lr=float(hp["learning_rate"]))
    checkpoints = Path(args.checkpoints)
    checkpoint = checkpoints / "checkpoint.pt"
    epochs, first = int(hp["epochs"]), 0
    if checkpoint.exists():
        state = torch.load(checkpoint, weights_only=False, map_location=device)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        restore_rng(state)
        first = state["epoch"] + 1
        print(f"resuming after epoch {first} of {epochs}", flush=True)
    started = time.monotonic()
    for epoch in range(first, epochs):
        model.train()
        total = 0.0
        for chunk in length_batches(data, int(hp["batch_size"])):
            items = [data[k] for k in chunk]
            b = {k: v.to(device) for k, v in text.batch(items, tuned).items()}
            loss = model.loss(b, torch.tensor([x["span"] for x in items], device=device))
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), float(hp.get("clip", 10.0)))
            optimizer.step()
            total += float(loss.detach()) * len(items)
        mean = total / len(data)
        eta = (time.monotonic() - started) / (epoch + 1 - first) * (epochs - epoch - 1)
        print(f"epoch {epoch + 1}/{epochs} loss {mean:.4f}", flush=True)
        save_atomic({"epoch": epoch, "model": model.state_dict(),
                     "optimizer": optimizer.state_dict(), **rng_state()}, checkpoint)
        write_progress(checkpoints, {"epoch": epoch + 1, "epochs": epochs, "loss": mean,
                                     "eta_s": eta})
    frozen.save_weights(Path(args.model) / WEIGHTS, model.state_dict())
    if contextual:  # the frozen system names the encoder it was trained with
        frozen.write_encoder_reference(Path(args.model))
    (Path(args.model) / "reader.json").write_text(json.dumps(
        {"spec": spec, "tuned": tuned, "chars": chars}, sort_keys=True))
    return 0


def predict(reader: type[nn.Module], args: argparse.Namespace) -> int:
    started = time.monotonic()
    torch.set_grad_enabled(False)
    saved = json.loads((Path(args.model) / "reader.json").read_text())
    spec, tuned = saved["spec"], saved["tuned"]
    set_threads(int(spec.get("threads", 0)))
    model = reader(spec)
    model.load_state_dict(frozen.load_weights(Path(args.model) / WEIGHTS))
    model.eval()
    tags, contextual = bool(spec.get("features", True)), bool(spec.get("contextual"))
    encoder = None
    if contextual:  # the encoder it was trained with, installed here
        frozen.checked_encoder_dir(Path(args.model))
        encoder = json.loads((Path(args.model) / frozen.ENCODER_REFERENCE).read_text())
    raw = json.load(open(args.input))
    items = text.examples(raw, parsed(args.input, raw, args.prepared, tags, encoder),
                          saved["chars"], tags, int(spec["max_passage"]), False)
    prepared_s = time.monotonic() - started
    answers = {}
    order = sorted(range(len(items)), key=lambda k: len(items[k]["p"].words))
    for b in range(0, len(order), 64):
        chunk = [items[k] for k in order[b:b + 64]]
        spans = model.best_spans(text.batch(chunk, tuned), int(spec["max_answer"]))
        for x, (s, e) in zip(chunk, spans, strict=True):
            offsets = x["p"].spans
            answers[x["id"]] = x["context"][offsets[s][0]:offsets[e][1]] \
                if e < len(offsets) else ""
    json.dump(answers, open(args.output, "w"))
    print(f"timing: inputs {prepared_s:.2f} s (prepared: {args.prepared is not None}), "
          f"forward {time.monotonic() - started - prepared_s:.2f} s", flush=True)
    return 0


def parsed(path: str, raw: dict, prepared_folder: str | None, tags: bool,
           encoder: dict | None) -> list:
    """The input's passages and questions as spaCy (and, with an `encoder` reference, that
    encoder) see them: from the service's prepared folder when it gives one, else parsed
    here."""
    if prepared_folder is not None:
        return prepared.read(Path(prepared_folder), Path(path), raw, encoder)
    out = text.parse(raw, tags)
    if encoder is not None:
        text.add_context(raw, out, text.ContextualEncoder(windows.encoder_dir()))
    return out


def arguments(argv: list[str]) -> argparse.Namespace:
    """`train --train --config --model --checkpoints` or `predict --model INPUT OUTPUT`."""
    parser = argparse.ArgumentParser(prog="approach.py")
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train")
    for flag in ("--train", "--config", "--model", "--checkpoints"):
        t.add_argument(flag, required=True)
    t.add_argument("--prepared", help="the service's prepared folder for --train")
    p = sub.add_parser("predict")
    p.add_argument("--model", required=True)
    p.add_argument("--prepared", help="the service's prepared folder for INPUT")
    p.add_argument("input")
    p.add_argument("output")
    return parser.parse_args(argv)


def main(reader: type[nn.Module], argv: list[str] | None = None) -> int:
    args = arguments(sys.argv[1:] if argv is None else argv)
    return train(reader, args) if args.command == "train" else predict(reader, args)
