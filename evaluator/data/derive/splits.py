"""Article-level splits of a SQuAD-format file: the training half and the held-out half.

Articles are ranked by sha256(salt + title), so a split depends only on the titles: AddSent
and AddOneSent, built on SQuAD dev's articles, split exactly like SQuAD dev.
"""

from __future__ import annotations

import random

from evaluator.core.errors import UserError
from evaluator.core.hashing import sha256_bytes
from evaluator.data.derive import register

SPLIT_SALT = "qashift-zoo-split-v1"


def heldout_split(raw: dict) -> tuple[dict, dict]:
    """SQuAD dev split by article into (training half, held-out half), deterministically.

    Articles are ranked by sha256(salt + title); the first half of the ranking trains, the
    rest is held out. Each half keeps the file's article order, so it is a valid SQuAD file.
    """
    articles = raw["data"]
    ranked = sorted(range(len(articles)), key=lambda i: sha256_bytes(
        f"{SPLIT_SALT}\0{articles[i].get('title', i)}".encode()))
    train_ids = set(ranked[: len(articles) // 2])
    version = raw.get("version", "")
    train = {"version": version, "data": [a for i, a in enumerate(articles) if i in train_ids]}
    heldout = {"version": version,
               "data": [a for i, a in enumerate(articles) if i not in train_ids]}
    return train, heldout


@register("zoo-heldout-half", version="1")
def heldout_half(parent: dict, params: dict, rng: random.Random) -> tuple[dict, dict]:
    """The held-out half (by article) of SQuAD dev, or of a set built on its articles
    (AddSent, AddOneSent: the same titles, so the same split); the population trains on the rest."""
    train, heldout = heldout_split(parent)
    count = lambda raw: sum(len(p["qas"]) for a in raw["data"] for p in a["paragraphs"])  # noqa: E731
    return heldout, {"articles": len(heldout["data"]), "questions": count(heldout),
                     "train_articles": len(train["data"]), "train_questions": count(train)}


def split_groups(raw: dict, unit: str) -> tuple[dict, dict]:
    """(train, test) halves by `unit`: 'article' (by title, as `heldout_split`) or
    'paragraph' (each paragraph its own group, by a hash of its context: for sets such as
    SQuADShifts Reddit, whose one "article" holds thousands of independent posts)."""
    if unit == "article":
        return heldout_split(raw)
    if unit != "paragraph":
        raise ValueError(f"unit must be article or paragraph, got {unit!r}")
    version = raw.get("version", "")
    train: dict = {"version": version, "data": []}
    test: dict = {"version": version, "data": []}
    for article in raw["data"]:
        ranked = sorted(range(len(article["paragraphs"])), key=lambda i: sha256_bytes(
            f"{SPLIT_SALT}\0{article['paragraphs'][i]['context']}".encode()))
        chosen = set(ranked[: len(ranked) // 2])
        for half, keep in ((train, True), (test, False)):
            paragraphs = [p for i, p in enumerate(article["paragraphs"])
                          if (i in chosen) == keep]
            if paragraphs:
                half["data"].append({**article, "paragraphs": paragraphs})
    return train, test


@register("split-half", version="1")
def split_half(parent: dict, params: dict, rng: random.Random) -> tuple[dict, dict]:
    """One half of a set, split deterministically by article (or paragraph): `part` is train
    or test; the other half of the same parent is the other part, never overlapping."""
    part, unit = params.get("part"), params.get("unit", "article")
    if part not in ("train", "test"):
        raise ValueError(f"split-half: part must be train or test, got {part!r}")
    train, test = split_groups(parent, unit)
    chosen = train if part == "train" else test
    count = lambda raw: sum(len(p["qas"]) for a in raw["data"] for p in a["paragraphs"])  # noqa: E731
    return chosen, {"unit": unit, "groups": sum(len(a["paragraphs"]) if unit == "paragraph"
                                                 else 1 for a in chosen["data"]),
                    "questions": count(chosen), "other_questions": count(
                        test if part == "train" else train)}


@register("concatenate", version="1")
def concatenate(parent: dict, params: dict, rng: random.Random) -> tuple[dict, dict]:
    """The parents of `from: [a, b, ...]`, article after article: a training split with
    extra data (the study's section 6.2). Question ids must stay unique across parents."""
    count = sum(len(p["qas"]) for a in parent["data"] for p in a["paragraphs"])
    return parent, {"articles": len(parent["data"]), "questions": count}


def sample_questions(raw: dict, size: int, rng: random.Random) -> dict:
    """`size` questions of a SQuAD-format file drawn with `rng`, in file order; paragraphs
    and articles left without questions are dropped."""
    positions = [(a, p, q) for a, article in enumerate(raw["data"])
                 for p, paragraph in enumerate(article["paragraphs"])
                 for q, _ in enumerate(paragraph["qas"])]
    if size > len(positions):
        raise UserError(f"train size {size} is more than the split's {len(positions)} "
                        f"questions")
    keep = set(rng.sample(positions, size))
    data = []
    for a, article in enumerate(raw["data"]):
        paragraphs = []
        for p, paragraph in enumerate(article["paragraphs"]):
            qas = [qa for q, qa in enumerate(paragraph["qas"]) if (a, p, q) in keep]
            if qas:
                paragraphs.append({**paragraph, "qas": qas})
        if paragraphs:
            data.append({**article, "paragraphs": paragraphs})
    return {"version": raw.get("version", ""), "data": data}


@register("downsample", version="1")
def downsample(parent: dict, params: dict, rng: random.Random) -> tuple[dict, dict]:
    """`questions` questions of the parent drawn with the folder's seed (Liu et al.'s
    downsampled SQuAD: fewer training examples, the same test set); the same questions as
    a study's train size with that seed."""
    n = int(params.get("questions", 0))
    if n <= 0:
        raise ValueError(f"downsample: questions must be a positive number, got {n}")
    chosen = sample_questions(parent, n, rng)
    return chosen, {"questions": n, "articles": len(chosen["data"]),
                    "paragraphs": sum(len(a["paragraphs"]) for a in chosen["data"])}
