"""The work on a test set that no reader's weights change, done once and shared.

    python3 -m span_readers.prepared [--encoder] INPUT.json FOLDER

parses every passage and question of INPUT with the full spaCy pipeline (tokens, lemmas, POS,
entities, word vectors) and, with `--encoder`, encodes them with the pinned MiniLM encoder
(the `contextual` readers' states; only approaches that have such readers ask for it), and
writes FOLDER:

- `texts.json`: the input's sha256 and, per passage and per question, its tokens, offsets,
  lemmas, tags, doc positions, the row of each token's vector and the first row of its states;
- `vectors.npy`: the distinct word vectors (row 0: none), float32;
- `context.npy` (`--encoder`): every token's encoder states, float16, passages first.

Nothing in it can run code when read (JSON and npy without pickle). A reader given `--prepared
FOLDER` builds from it exactly the texts it would have parsed itself (`read`), and refuses a
folder made from other input bytes. The service runs this command once per test set and
environment (the bundle's `prepare:`) and hands the folder to every system, read-only.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from span_readers import frozen, text, windows

FORMAT = 1
TEXTS, VECTORS, CONTEXT = "texts.json", "vectors.npy", "context.npy"


def write(input_path: Path, folder: Path, encoder: bool = False) -> None:
    raw = json.loads(Path(input_path).read_text())
    parsed = text.parse(raw, tags=True)
    if encoder:
        text.add_context(raw, parsed, text.ContextualEncoder(windows.encoder_dir()))
    rows: dict[str, int] = {}
    vectors: list[np.ndarray] = [np.zeros(300, np.float32)]
    states: list[np.ndarray] = []
    offset = 0

    def record(p: text.Parsed) -> dict:
        nonlocal offset
        ids = []
        for word, vector, known in zip(p.words, p.vectors, p.known, strict=True):
            if not known:
                ids.append(0)
                continue
            if word not in rows:
                rows[word] = len(vectors)
                vectors.append(vector.astype(np.float32))
            ids.append(rows[word])
        doc = {"words": p.words, "spans": p.spans, "lemma": p.lemma, "pos": p.pos,
               "ner": p.ner, "index": p.index, "vec": ids, "ctx": offset}
        if p.context is not None:
            states.append(p.context)
        offset += len(p.words)
        return doc

    passages = [record(p) for p, _ in parsed]
    questions = [record(q) for _, qs in parsed for q in qs]
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / VECTORS, np.stack(vectors))
    if encoder:
        np.save(folder / CONTEXT, np.concatenate(states) if states else
                np.zeros((0, 384), np.float16))
    (folder / TEXTS).write_text(json.dumps(
        {"format": FORMAT, "input_sha256": frozen.sha256_file(input_path),
         "encoder": frozen.encoder_reference() if encoder else None, "passages": passages,
         "questions": questions}, separators=(",", ":")))


def read(folder: Path, input_path: Path, raw: dict,
         encoder: dict | None) -> list[tuple[text.Parsed, list[text.Parsed]]]:
    """The parsed passages and questions of `raw` (read from `input_path`), as `text.parse`
    would give them; with `encoder` (the reference of the encoder a reader was trained with)
    also its states, as `text.add_context` would set them, once they are that encoder's."""
    doc = json.loads((folder / TEXTS).read_text())
    if doc.get("format") != FORMAT or doc.get("input_sha256") != frozen.sha256_file(input_path):
        raise SystemExit(f"prepared inputs {folder} were made from other input bytes "
                         f"or another format")
    if encoder is not None and doc["encoder"] is None:
        raise SystemExit(f"prepared inputs {folder} hold no encoder states (the approach's "
                         f"prepare: command needs --encoder for a contextual reader)")
    if encoder is not None and doc["encoder"]["files"] != encoder["files"]:
        raise SystemExit(f"prepared inputs {folder} hold the states of another encoder "
                         f"({doc['encoder']['package']} {doc['encoder']['version']})")
    table = np.load(folder / VECTORS, allow_pickle=False)
    context = np.load(folder / CONTEXT, allow_pickle=False, mmap_mode="r") \
        if encoder is not None else None

    def parsed(d: dict) -> text.Parsed:
        ids = np.asarray(d["vec"], np.int64)
        n = len(d["words"])
        return text.Parsed(
            words=d["words"], spans=[tuple(s) for s in d["spans"]], lemma=d["lemma"],
            pos=d["pos"], ner=d["ner"], index=d["index"],
            vectors=table[ids] if n else np.zeros((0, 300), np.float32), known=ids > 0,
            context=None if context is None else np.array(context[d["ctx"]:d["ctx"] + n]))

    questions = iter(doc["questions"])
    out = []
    paragraphs = text.paragraphs_of(raw)
    if len(paragraphs) != len(doc["passages"]):
        raise SystemExit(f"prepared inputs {folder} do not match {input_path}")
    for paragraph, passage in zip(paragraphs, doc["passages"], strict=True):
        out.append((parsed(passage), [parsed(next(questions)) for _ in paragraph["qas"]]))
    return out


if __name__ == "__main__":
    arguments = sys.argv[1:]
    with_encoder = arguments[:1] == ["--encoder"]
    arguments = arguments[1:] if with_encoder else arguments
    if len(arguments) != 2:
        sys.exit("usage: python3 -m span_readers.prepared [--encoder] INPUT.json FOLDER")
    write(Path(arguments[0]), Path(arguments[1]), with_encoder)
