"""Article-level splits of a SQuAD-format file: the zoo's training half and held-out half.

Articles are ranked by sha256(salt + title), so a split depends only on the titles: AddSent
and AddOneSent, built on SQuAD dev's articles, split exactly like SQuAD dev.
"""

from __future__ import annotations

import random

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
    (AddSent, AddOneSent: the same titles, so the same split); the zoo trains on the rest."""
    train, heldout = heldout_split(parent)
    count = lambda raw: sum(len(p["qas"]) for a in raw["data"] for p in a["paragraphs"])  # noqa: E731
    return heldout, {"articles": len(heldout["data"]), "questions": count(heldout),
                     "train_articles": len(train["data"]), "train_questions": count(train)}
