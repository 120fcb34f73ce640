"""A frozen pre-trained encoder with a trained span head: all-MiniLM-L6-v2's token states
(word-piece windows of question + passage, as for fine-tuning) are computed once and never
updated; only the head learns. `head: bilstm` reads them with a BiLSTM of `hidden` units
before the start/end layer (the ELMo-era recipe of contextual features under a task model);
`head: linear` is the start/end layer alone (a probe of what the encoder already knows).

Checkpoints after each epoch (head, optimizer, every RNG state); a killed run recomputes the
encoder states and resumes from the last epoch. The frozen model holds the head and a
reference to the encoder (its package and file digests; see `span_readers.frozen`).
"""

import argparse
import json
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch
from span_readers import frozen, layers, loop, windows
from torch import nn
from transformers import AutoModel, AutoTokenizer

HEAD = "head.safetensors"


class Head(nn.Module):
    def __init__(self, spec: dict):
        super().__init__()
        h, size = int(spec["hidden"]), int(spec["encoder_size"])
        self.rnn = layers.birnn("lstm", size, h) if spec["head"] == "bilstm" else None
        self.dropout = nn.Dropout(float(spec["dropout"]))
        self.out = nn.Linear(2 * h if self.rnn is not None else size, 2)

    def forward(self, states: torch.Tensor, mask: torch.Tensor):
        x = self.dropout(states)
        if self.rnn is not None:
            x = self.dropout(layers.encode(self.rnn, x, mask))
        start, end = self.out(x).unbind(-1)
        return start.masked_fill(~mask, layers.NEG), end.masked_fill(~mask, layers.NEG)


def encoder_states(encoder, tokenizer, feats: list[tuple]) -> list[torch.Tensor]:
    """The frozen encoder's last-layer states of every window (float16, unpadded)."""
    out: list[torch.Tensor | None] = [None] * len(feats)
    order = sorted(range(len(feats)), key=lambda k: len(feats[k][0]))
    with torch.no_grad():
        for b in range(0, len(order), 64):
            chunk = order[b:b + 64]
            states = encoder(**windows.pad([feats[k] for k in chunk],
                                           tokenizer.pad_token_id)).last_hidden_state
            for row, k in enumerate(chunk):
                out[k] = states[row, :len(feats[k][0])].to(torch.float16)
    return out


def padded(states: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in states)
    x = torch.zeros(len(states), width, states[0].shape[1])
    mask = torch.zeros(len(states), width, dtype=torch.bool)
    for row, s in enumerate(states):
        x[row, :len(s)] = s.float()
        mask[row, :len(s)] = True
    return x, mask


def train(args: argparse.Namespace) -> int:
    config = json.load(open(args.config))
    hp, seed = config["hyperparameters"], int(config["seed"])
    loop.set_threads(int(hp.get("threads", 0)))
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(windows.encoder_dir())
    encoder = AutoModel.from_pretrained(windows.encoder_dir(),
                                        num_hidden_layers=int(hp["layers"])).eval()
    feats = windows.training_windows(tokenizer, json.load(open(args.train)),
                                     int(hp["max_seq_len"]), int(hp["doc_stride"]))
    started = time.monotonic()
    states = encoder_states(encoder, tokenizer, feats)
    print(f"encoded {len(feats)} windows in {time.monotonic() - started:.0f} s", flush=True)
    spec = {**hp, "encoder_size": encoder.config.hidden_size}
    head = Head(spec)
    optimizer = torch.optim.Adam(head.parameters(), lr=float(hp["learning_rate"]))
    checkpoints = Path(args.checkpoints)
    checkpoint = checkpoints / "checkpoint.pt"
    epochs, first = int(hp["epochs"]), 0
    if checkpoint.exists():
        state = torch.load(checkpoint, weights_only=False)
        head.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        loop.restore_rng(state)
        first = state["epoch"] + 1
        print(f"resuming after epoch {first} of {epochs}", flush=True)
    size, started = int(hp["batch_size"]), time.monotonic()
    for epoch in range(first, epochs):
        head.train()
        order = list(range(len(feats)))
        random.shuffle(order)
        total = 0.0
        for b in range(0, len(order), size):
            chunk = order[b:b + size]
            x, mask = padded([states[k] for k in chunk])
            start, end = head(x, mask)
            gold = torch.tensor([feats[k][2:] for k in chunk])
            loss = nn.functional.cross_entropy(start, gold[:, 0]) + \
                nn.functional.cross_entropy(end, gold[:, 1])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * len(chunk)
        mean = total / len(feats)
        eta = (time.monotonic() - started) / (epoch + 1 - first) * (epochs - epoch - 1)
        print(f"epoch {epoch + 1}/{epochs} loss {mean:.4f}", flush=True)
        loop.save_atomic({"epoch": epoch, "model": head.state_dict(),
                          "optimizer": optimizer.state_dict(), **loop.rng_state()}, checkpoint)
        loop.write_progress(checkpoints, {"epoch": epoch + 1, "epochs": epochs, "loss": mean,
                                          "eta_s": eta})
    frozen.write_encoder_reference(Path(args.model))  # the encoder is the package's, unchanged
    frozen.save_weights(Path(args.model) / HEAD, head.state_dict())
    (Path(args.model) / "head.json").write_text(json.dumps(spec, sort_keys=True))
    return 0


def predict(args: argparse.Namespace) -> int:
    torch.set_grad_enabled(False)
    spec = json.loads((Path(args.model) / "head.json").read_text())
    loop.set_threads(int(spec.get("threads", 0)))
    encoder_dir = frozen.checked_encoder_dir(Path(args.model))
    tokenizer = AutoTokenizer.from_pretrained(encoder_dir)
    encoder = AutoModel.from_pretrained(encoder_dir, num_hidden_layers=int(spec["layers"])).eval()
    head = Head(spec)
    head.load_state_dict(frozen.load_weights(Path(args.model) / HEAD))
    head.eval()

    def logits(batch: dict):
        states = encoder(**batch).last_hidden_state
        return head(states, batch["attention_mask"].bool())

    answers = windows.predict_windows(tokenizer, json.load(open(args.input)),
                                      int(spec["max_seq_len"]), int(spec["doc_stride"]), logits)
    json.dump(answers, open(args.output, "w"))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = loop.arguments(sys.argv[1:] if argv is None else argv)
    return train(args) if args.command == "train" else predict(args)


if __name__ == "__main__":
    sys.exit(main())
