"""Extractive-QA pre- and post-processing, equal to `transformers.pipeline("question-answering")`.

Why our own: the pipeline runs one window at a time through a generic iterator; we tokenize
every question at once, sort windows by length into batches padded only to their own
longest member, and decode with numpy. The decisions are the pipeline's (transformers
4.57.6, `QuestionAnsweringPipeline.preprocess/postprocess`), so answers match it:

- windows: question first (for right-padding tokenizers), context truncated
  (`only_second`); `max_seq_len` min(tokenizer maximum, 384), `doc_stride` min(half, 128);
- per window: a softmax of start and end logits over the context tokens plus [CLS]; [CLS]
  zeroed; span score p(start) * p(end) with start <= end < start + max_answer_len (15);
  the 12 best spans (top_k * 2 + 10) are kept;
- each kept span becomes text: the context characters of the whole words containing its
  start and end tokens (`align_to_words`), falling back to token offsets;
- spans with equal text (ignoring case) pool their scores over all windows of the question;
  the highest pooled score wins, the first proposed on ties.

Only numpy here; the model runs elsewhere (evaluator.runners.hfqa).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MASKED = -10000.0
PRE_TOP_K = 12  # the pipeline keeps top_k * 2 + 10 spans per window when aligning to words


@dataclass(frozen=True)
class QASettings:
    """Window and span limits; None means the pipeline's default for the tokenizer."""

    max_seq_len: int | None = None  # default: min(tokenizer maximum, 384)
    doc_stride: int | None = None  # default: min(max_seq_len // 2, 128)
    max_answer_len: int = 15
    align_to_words: bool = True

    def for_tokenizer(self, tokenizer) -> QASettings:
        """The effective values, resolved exactly as the pipeline resolves them."""
        max_len = self.max_seq_len or min(int(tokenizer.model_max_length), 384)
        stride = self.doc_stride if self.doc_stride is not None else min(max_len // 2, 128)
        if stride > max_len:
            raise ValueError(f"doc_stride ({stride}) is larger than max_seq_len ({max_len})")
        return QASettings(max_len, stride, self.max_answer_len, self.align_to_words)


@dataclass(frozen=True)
class Item:
    """One question to answer."""

    id: str
    question: str
    context: str


@dataclass
class Windows:
    """Tokenized windows of all questions: ids, token types, and which item each belongs to."""

    encoding: object  # transformers BatchEncoding (fast tokenizer, with offsets)
    input_ids: list[list[int]]
    token_type_ids: list[list[int]]
    item_of: list[int]
    candidates: list[np.ndarray]  # bool per token: may start/end an answer (context + [CLS])
    question_first: bool

    def __len__(self) -> int:
        return len(self.input_ids)


def items_from_squad(raw: dict) -> list[Item]:
    """Every question of a SQuAD-format document, in file order."""
    return [Item(str(qa["id"]), qa["question"], paragraph["context"])
            for article in raw["data"] for paragraph in article["paragraphs"]
            for qa in paragraph["qas"]]


def tokenize(tokenizer, items: list[Item], settings: QASettings) -> Windows:
    """All windows of all items in one fast-tokenizer call (same windows as one at a time)."""
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError("a fast tokenizer (tokenizer.json) is required for character offsets")
    question_first = tokenizer.padding_side == "right"
    questions = [it.question for it in items]
    contexts = [it.context for it in items]
    enc = tokenizer(
        questions if question_first else contexts,
        contexts if question_first else questions,
        truncation="only_second" if question_first else "only_first",
        max_length=settings.max_seq_len, stride=settings.doc_stride,
        return_overflowing_tokens=True, return_offsets_mapping=True,
        return_token_type_ids=True, padding=False)
    context_seq = 1 if question_first else 0
    cls_id = tokenizer.cls_token_id
    candidates = []
    for w, ids in enumerate(enc["input_ids"]):
        if question_first:
            mask = np.array([s == context_seq for s in enc.sequence_ids(w)], dtype=bool)
        else:  # the pipeline masks nothing for left-padding (context-first) tokenizers
            mask = np.ones(len(ids), dtype=bool)
        if cls_id is not None:
            mask |= np.asarray(ids) == cls_id
        candidates.append(mask)
    return Windows(enc, enc["input_ids"], enc["token_type_ids"],
                   list(enc["overflow_to_sample_mapping"]), candidates, question_first)


def length_batches(lengths: list[int], batch_size: int) -> list[list[int]]:
    """Window indices grouped into batches of similar length (longest first), so padding is
    small and the first batch shows at once whether the largest one fits in memory."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def pad(windows: Windows, batch: list[int], pad_id: int) -> dict[str, np.ndarray]:
    """int64 arrays padded to the batch's longest window (dynamic padding)."""
    width = max(len(windows.input_ids[i]) for i in batch)
    ids = np.full((len(batch), width), pad_id, dtype=np.int64)
    types = np.zeros((len(batch), width), dtype=np.int64)
    mask = np.zeros((len(batch), width), dtype=np.int64)
    for row, i in enumerate(batch):
        k = len(windows.input_ids[i])
        ids[row, :k] = windows.input_ids[i]
        types[row, :k] = windows.token_type_ids[i]
        mask[row, :k] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def window_spans(start: np.ndarray, end: np.ndarray, candidates: np.ndarray,
                 max_answer_len: int, top_k: int = PRE_TOP_K) -> list[tuple[int, int, float]]:
    """The window's best (start token, end token, score) spans, best first, as the pipeline
    ranks them. `start`/`end` are the window's logits (unpadded), `candidates` its mask."""
    start = np.where(~candidates, MASKED, start.astype(np.float32))[None]
    end = np.where(~candidates, MASKED, end.astype(np.float32))[None]
    start = np.exp(start - start.max(axis=-1, keepdims=True))
    start = start / start.sum()
    end = np.exp(end - end.max(axis=-1, keepdims=True))
    end = end / end.sum()
    start[0, 0] = end[0, 0] = 0.0  # the pipeline zeroes position 0 ([CLS]) after normalising
    # Upper-triangular band of the outer product: start <= end < start + max_answer_len.
    outer = np.matmul(np.expand_dims(start, -1), np.expand_dims(end, 1))
    band = np.tril(np.triu(outer), max_answer_len - 1)
    flat = band.flatten()
    if top_k == 1:
        order = np.array([np.argmax(flat)])
    elif len(flat) < top_k:
        order = np.argsort(-flat)
    else:
        top = np.argpartition(-flat, top_k)[0:top_k]
        order = top[np.argsort(-flat[top])]
    starts, ends = np.unravel_index(order, band.shape)[1:]
    allowed = np.concatenate([np.zeros(1, dtype=np.int64), np.flatnonzero(candidates)])
    keep = np.isin(starts, allowed) & np.isin(ends, allowed)
    return [(int(s), int(e), float(band[0, s, e])) for s, e in zip(starts[keep], ends[keep])]


def answer_text(windows: Windows, window: int, s: int, e: int, context: str,
                align_to_words: bool = True) -> str:
    """The context characters of tokens s..e, widened to whole words like the pipeline."""
    enc = windows.encoding.encodings[window]
    seq = 1 if windows.question_first else 0
    if align_to_words:
        try:
            first = enc.word_to_chars(enc.token_to_word(s), sequence_index=seq)[0]
            last = enc.word_to_chars(enc.token_to_word(e), sequence_index=seq)[1]
            return context[first:last]
        except Exception:  # noqa: BLE001 - the pipeline falls back the same way
            pass
    return context[enc.offsets[s][0]:enc.offsets[e][1]]


def decode(windows: Windows, items: list[Item], start_logits: list[np.ndarray],
           end_logits: list[np.ndarray], settings: QASettings) -> dict[str, str]:
    """{question id: answer} from per-window logits (each trimmed to its window's length).

    Like the pipeline: each window proposes its top spans; spans whose (word-aligned) texts
    are equal ignoring case pool their scores, over all windows of the question; the
    highest pooled score wins, the first proposed on ties."""
    pooled: dict[int, list[list]] = {}  # item -> [[text, score], ...] in proposal order
    for w in range(len(windows)):
        item = windows.item_of[w]
        context = items[item].context
        proposals = pooled.setdefault(item, [])
        for s, e, score in window_spans(start_logits[w], end_logits[w], windows.candidates[w],
                                        settings.max_answer_len):
            text = answer_text(windows, w, s, e, context, settings.align_to_words)
            key = text.lower()
            for entry in proposals:
                if entry[0].lower() == key:
                    entry[1] += score
                    break
            else:
                proposals.append([text, score])
    answers = {}
    for i, it in enumerate(items):
        proposals = sorted(pooled.get(i, []), key=lambda entry: entry[1], reverse=True)
        answers[it.id] = proposals[0][0] if proposals else ""
    return answers
