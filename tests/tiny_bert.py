"""A tiny randomly initialised BERT QA checkpoint built from a config, with a WordPiece
vocabulary trained on the test text: hf-qa tests need no download."""

from __future__ import annotations

from pathlib import Path


def make_tiny_bert(folder: Path, texts: list[str], seed: int = 0) -> Path:
    """A 2-layer, 32-wide BERT QA model with a vocabulary trained on `texts`."""
    import torch
    from transformers import BertConfig, BertForQuestionAnswering

    tokenizer = _wordpiece(folder, texts)
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=512)
    BertForQuestionAnswering(config).eval().save_pretrained(folder)
    return folder


def _wordpiece(folder: Path, texts: list[str]):
    """A lower-casing WordPiece tokenizer of 1,500 pieces trained on `texts`, saved in
    `folder` (created)."""
    from tokenizers import BertWordPieceTokenizer
    from transformers import BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    wordpiece = BertWordPieceTokenizer(lowercase=True)
    wordpiece.train_from_iterator(texts, vocab_size=1500, min_frequency=1, show_progress=False)
    wordpiece.save_model(str(folder))
    tokenizer = BertTokenizerFast(vocab=str(folder / "vocab.txt"), do_lower_case=True)
    tokenizer.save_pretrained(folder)
    return tokenizer


def squad_texts(raw: dict) -> list[str]:
    return [p["context"] for a in raw["data"] for p in a["paragraphs"]] + \
        [qa["question"] for a in raw["data"] for p in a["paragraphs"] for qa in p["qas"]]


def subset(raw: dict, articles: slice, per_paragraph: int = 2) -> dict:
    """A few questions of every paragraph of some articles: many contexts, few questions."""
    return {"version": "1.1", "data": [
        {"title": a["title"], "paragraphs": [
            {"context": p["context"], "qas": p["qas"][:per_paragraph]} for p in a["paragraphs"]]}
        for a in raw["data"][articles]]}


def write_hfqa_bundle(root: Path, bundle_id: str, model: Path, extra: str = "",
                      resources: str = "{timeout: 300}") -> Path:
    """A bundle folder `root/bundle_id` running the checkpoint at `model`."""
    folder = root / bundle_id
    folder.mkdir(parents=True)
    (folder / "bundle.yaml").write_text(
        f"id: {bundle_id}\nname: {bundle_id}\nkind: hf-qa\nmodel: {{path: {model}}}\n"
        f"resources: {resources}\n{extra}")
    return folder


def make_tiny_causal_lm(folder: Path, texts: list[str], seed: int = 0) -> Path:
    """A 1-layer, 32-wide BERT decoder (`AutoModelForCausalLM` loads it) with a vocabulary
    trained on `texts`: a generative model to run, not to answer well."""
    import torch
    from transformers import BertConfig, BertLMHeadModel

    tokenizer = _wordpiece(folder, texts)
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=2048, is_decoder=True)
    BertLMHeadModel(config).eval().save_pretrained(folder)
    return folder
