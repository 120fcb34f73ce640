"""Logistic regression over candidate answer spans, after Rajpurkar et al. (2016), section 5.

    python3 approach.py train --train TRAIN.json --config CONFIG.json --model DIR --checkpoints DIR
    python3 approach.py predict --model DIR INPUT.json OUTPUT.json

A multinomial logistic regression chooses, for each question, one span among the candidates
of its paragraph. The paper's candidates are the constituents of a parse and its features
include parse-based ones (root match, constituent labels, dependency paths, POS tags); this
approach has no parser, so its candidates are all spans of up to `max_span` tokens in the
`top_sentences` sentences that share the most (idf-weighted) words with the question, and its
features are the paper's lexical and frequency ones:

- matching word frequency: idf-weighted share of the question's words in the span's sentence,
  and the question words in the three tokens left and right of the span;
- matching bigram frequency of the sentence; span length; the share of span words that the
  question already contains (answers rarely repeat the question); digits and capitals;
  distance to the nearest matching word;
- lexicalized features, hashed into 2**18 weights: the question's wh-word crossed with the
  span's first, last, preceding and following word and with its length.

Training minimises the negative log-likelihood of the gold span with Adam and L2; it saves a
checkpoint (weights, optimizer, every RNG state) after each epoch and resumes from it, so a
killed run ends with the same weights as an uninterrupted one. One thread, fixed seeds:
the same inputs give the same weights, byte for byte.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import sys
import time
import zlib
from collections import Counter

import numpy as np
import torch

TOKEN = re.compile(r"\w+|[^\w\s]")
WH = ("what", "which", "who", "whom", "whose", "when", "where", "why", "how")
STOP = frozenset("a an the of in on at to for from by with and or is are was were be been "
                 "does do did has have had it its this that these those as which what who "
                 "when where why how whom whose".split())
BUCKETS = 1 << 18
DENSE = 12  # dense features besides the span-length one-hot


def tokenize(text: str) -> list[tuple[str, int, int]]:
    return [(m.group(), m.start(), m.end()) for m in TOKEN.finditer(text)]


def sentence_ranges(toks: list[tuple[str, int, int]]) -> list[tuple[int, int]]:
    out, start = [], 0
    for i, (tok, _, _) in enumerate(toks):
        if tok in (".", "!", "?"):
            out.append((start, i + 1))
            start = i + 1
    if start < len(toks):
        out.append((start, len(toks)))
    return out


def bucket(*parts: str) -> int:
    return zlib.crc32("\x1f".join(parts).encode()) % BUCKETS


class Featurizer:
    def __init__(self, idf: dict[str, float], max_span: int, top_sentences: int):
        self.idf, self.max_span, self.top = idf, max_span, top_sentences
        self.default_idf = max(idf.values(), default=1.0)

    def paragraph(self, context: str) -> dict:
        toks = tokenize(context)
        lower = [t[0].lower() for t in toks]
        return {"toks": toks, "lower": lower, "sents": sentence_ranges(toks)}

    def candidates(self, para: dict, question: str):
        """(spans, dense features, hashed feature ids) of one question's candidates."""
        q = [t.lower() for t, _, _ in tokenize(question)]
        content = {w for w in q if w not in STOP and w.isalnum()}
        wh = next((w for w in q if w in WH), "other")
        q_bigrams = set(zip(q, q[1:]))
        weight = sum(self.idf.get(w, self.default_idf) for w in content) or 1.0
        lower = para["lower"]
        scored = []
        for s, (a, b) in enumerate(para["sents"]):
            words = set(lower[a:b])
            overlap = sum(self.idf.get(w, self.default_idf) for w in content & words) / weight
            scored.append((overlap, -s, s))
        keep = sorted(sorted(scored, reverse=True)[: self.top], key=lambda x: x[2])
        spans, dense, hashed = [], [], []
        for overlap, _, s in keep:
            a, b = para["sents"][s]
            bigrams = len(q_bigrams & set(zip(lower[a:b], lower[a + 1:b])))
            matches = [i for i in range(a, b) if lower[i] in content]
            for i in range(a, b):
                for j in range(i, min(b, i + self.max_span)):
                    span = lower[i:j + 1]
                    if not any(w.isalnum() for w in span):
                        continue
                    left = sum(w in content for w in lower[max(a, i - 3):i])
                    right = sum(w in content for w in lower[j + 1:j + 4])
                    near = min((min(abs(m - i), abs(m - j)) for m in matches), default=b - a)
                    first = para["toks"][i][0]
                    features = [overlap, math.log1p(bigrams), left, right,
                                sum(w in q for w in span) / len(span),
                                float(any(c.isdigit() for w in span for c in w)),
                                float(first[:1].isupper()), math.log1p(near),
                                float(s == 0), float(i == a), float(j == b - 1), 1.0]
                    length = [0.0] * self.max_span
                    length[j - i] = 1.0
                    spans.append((i, j))
                    dense.append(features + length)
                    prev = lower[i - 1] if i > a else "<s>"
                    nxt = lower[j + 1] if j + 1 < b else "</s>"
                    hashed.append([bucket("f", wh, span[0]), bucket("l", wh, span[-1]),
                                   bucket("p", wh, prev), bucket("n", wh, nxt),
                                   bucket("len", wh, str(j - i)), bucket("w", span[0])])
        return spans, np.asarray(dense, np.float32), np.asarray(hashed, np.int64)


class Model(torch.nn.Module):
    def __init__(self, dense: int):
        super().__init__()
        self.dense = torch.nn.Linear(dense, 1, bias=False)
        self.lexical = torch.nn.Embedding(BUCKETS, 1)
        torch.nn.init.zeros_(self.dense.weight)
        torch.nn.init.zeros_(self.lexical.weight)

    def forward(self, dense: torch.Tensor, hashed: torch.Tensor) -> torch.Tensor:
        return self.dense(dense).squeeze(-1) + self.lexical(hashed).sum(dim=(-1, -2))


def examples(raw: dict, featurizer: Featurizer) -> list[tuple]:
    """(dense, hashed, gold mask) per answerable training question."""
    out = []
    for article in raw["data"]:
        for paragraph in article["paragraphs"]:
            para = featurizer.paragraph(paragraph["context"])
            for qa in paragraph["qas"]:
                spans, dense, hashed = featurizer.candidates(para, qa["question"])
                gold = set()
                for answer in qa.get("answers", []):
                    start = answer["answer_start"]
                    end = start + len(answer["text"])
                    toks = [k for k, (_, s, e) in enumerate(para["toks"]) if s < end and e > start]
                    if toks:
                        gold.add((toks[0], toks[-1]))
                mask = np.asarray([span in gold for span in spans], bool)
                if mask.any():
                    out.append((dense, hashed, mask))
    return out


def idf_of(raw: dict) -> dict[str, float]:
    docs = [set(t[0].lower() for t in tokenize(p["context"]))
            for a in raw["data"] for p in a["paragraphs"]]
    df = Counter(w for doc in docs for w in doc)
    return {w: math.log((1 + len(docs)) / (1 + n)) + 1.0 for w, n in df.items()}


def batch(items: list[tuple]) -> tuple[torch.Tensor, ...]:
    width = max(len(x[2]) for x in items)
    dense = torch.zeros(len(items), width, items[0][0].shape[1])
    hashed = torch.zeros(len(items), width, items[0][1].shape[1], dtype=torch.long)
    valid = torch.zeros(len(items), width, dtype=torch.bool)
    gold = torch.zeros(len(items), width, dtype=torch.bool)
    for row, (d, h, m) in enumerate(items):
        n = len(m)
        dense[row, :n], hashed[row, :n] = torch.from_numpy(d), torch.from_numpy(h)
        valid[row, :n], gold[row, :n] = True, torch.from_numpy(m)
    return dense, hashed, valid, gold


def save_atomic(obj, path: str) -> None:
    torch.save(obj, path + ".partial")
    os.replace(path + ".partial", path)


def train(args) -> int:
    config = json.load(open(args.config))
    hp, seed = config["hyperparameters"], int(config["seed"])
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    raw = json.load(open(args.train))
    idf = idf_of(raw)
    featurizer = Featurizer(idf, int(hp["max_span"]), int(hp["top_sentences"]))
    data = examples(raw, featurizer)
    if not data:
        print("no training question has its answer among the candidates", file=sys.stderr)
        return 2
    model = Model(DENSE + featurizer.max_span)
    optimizer = torch.optim.Adam(model.parameters(), lr=float(hp["learning_rate"]))
    epochs, start_epoch = int(hp["epochs"]), 0
    checkpoint = os.path.join(args.checkpoints, "checkpoint.pt")
    if os.path.exists(checkpoint):
        state = torch.load(checkpoint, weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        random.setstate(state["python_rng"])
        np.random.set_state(state["numpy_rng"])
        torch.set_rng_state(state["torch_rng"])
        start_epoch = state["epoch"] + 1
        print(f"resuming after epoch {state['epoch'] + 1} of {epochs}", flush=True)
    started = time.monotonic()
    size, l2 = int(hp["batch_size"]), float(hp["l2"])
    for epoch in range(start_epoch, epochs):
        order = list(range(len(data)))
        random.shuffle(order)
        total = 0.0
        for begin in range(0, len(order), size):
            dense, hashed, valid, gold = batch([data[k] for k in order[begin:begin + size]])
            scores = model(dense, hashed).masked_fill(~valid, -1e9)
            loss = (torch.logsumexp(scores, 1) -
                    torch.logsumexp(scores.masked_fill(~gold, -1e9), 1)).mean()
            loss = loss + l2 * model.dense.weight.pow(2).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * len(dense)
        mean = total / len(data)
        done = epoch + 1 - start_epoch
        eta = (time.monotonic() - started) / done * (epochs - epoch - 1)
        print(f"epoch {epoch + 1}/{epochs} loss {mean:.4f}", flush=True)
        save_atomic({"epoch": epoch, "model": model.state_dict(),
                     "optimizer": optimizer.state_dict(), "python_rng": random.getstate(),
                     "numpy_rng": np.random.get_state(), "torch_rng": torch.get_rng_state()},
                    checkpoint)
        with open(os.path.join(args.checkpoints, "progress.json.partial"), "w") as handle:
            json.dump({"epoch": epoch + 1, "epochs": epochs, "loss": mean, "eta_s": eta},
                      handle)
        os.replace(os.path.join(args.checkpoints, "progress.json.partial"),
                   os.path.join(args.checkpoints, "progress.json"))
    np.save(os.path.join(args.model, "dense.npy"), model.dense.weight.detach().numpy())
    np.save(os.path.join(args.model, "lexical.npy"), model.lexical.weight.detach().numpy())
    with open(os.path.join(args.model, "features.json"), "w") as handle:
        json.dump({"idf": idf, "max_span": featurizer.max_span, "top": featurizer.top}, handle,
                  sort_keys=True)
    print(f"trained on {len(data)} questions", flush=True)
    return 0


def predict(args) -> int:
    features = json.load(open(os.path.join(args.model, "features.json")))
    featurizer = Featurizer(features["idf"], features["max_span"], features["top"])
    dense_w = np.load(os.path.join(args.model, "dense.npy"))[0]
    lexical_w = np.load(os.path.join(args.model, "lexical.npy"))[:, 0]
    doc = json.load(open(args.input))
    answers = {}
    for article in doc["data"]:
        for paragraph in article["paragraphs"]:
            context = paragraph["context"]
            para = featurizer.paragraph(context)
            for qa in paragraph["qas"]:
                spans, dense, hashed = featurizer.candidates(para, qa["question"])
                if not spans:
                    answers[qa["id"]] = ""
                    continue
                scores = dense @ dense_w + lexical_w[hashed].sum(axis=1)
                i, j = spans[int(np.argmax(scores))]
                answers[qa["id"]] = context[para["toks"][i][1]:para["toks"][j][2]]
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
