"""Leaderboard names: a description such as "MARS (single model, May 9 2018) (Inst)" split
into model name, kind tag, note and institution. The leaderboard importer names bundle folders
with it and the analysis' reconciliation matches published names with it: one parser."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import cache

_KIND = re.compile(
    r"\(\s*(single|ensemble)(?:\s+model)?(?:[\s-]*\d+)?\s*(?:,\s*([^)]*?))?\s*\)", re.I)
_URL = re.compile(r"\s+(?:https?://|www\.)\S*\s*$")

def normal_text(s: str | None) -> str:
    """Unicode-normalised, single-spaced text."""
    s = unicodedata.normalize("NFKC", s or "")
    return re.sub(r"\s+", " ", s).strip()


@cache  # a join compares every pair of names
def name_key(s: str) -> str:
    """Comparison key for a model name: case, spacing, punctuation and braces ignored."""
    s = normal_text(s).lower().replace("w/", "with ")
    return re.sub(r"[^a-z0-9+]", "", s)


@dataclass(frozen=True)
class Parsed:
    """A name split into the model name, kind tag ("single"/"ensemble"), note and institution."""

    raw: str
    name: str
    kind: str | None
    kind_label: str | None
    note: str | None
    institution: str | None

    @property
    def key(self) -> str:
        return name_key(self.name)


def parse_name(text: str, institution: str | None = None,
               trailing_institution: bool = False) -> Parsed:
    """Split ``"MARS (single model, May 9 2018) (Inst)"`` into its parts.

    With ``trailing_institution`` (leaderboard descriptions), a last parenthesised group
    without a kind tag is taken as the institution, as in ``"FastQA (DFKI)"``.
    """
    raw = normal_text(text)
    s = _URL.sub("", " " + raw).strip()
    m = _KIND.search(s)
    inst = normal_text(institution) or None
    if m:
        name, rest = s[: m.start()], s[m.end():].strip()
        kind, note = m.group(1).lower(), (m.group(2) or None)
        label = normal_text(m.group(0)[1:-1]).lower()
        rest = rest.strip().strip("()").strip()
        if rest and not inst:
            inst = rest
    else:
        name, kind, note, label = s, None, None, None
        if trailing_institution:
            tail = re.search(r"\(([^()]*)\)\s*$", s)
            if tail and tail.start() > 0:
                name, inst = s[: tail.start()], normal_text(tail.group(1)) or inst
    return Parsed(raw, normal_text(name), kind, label, note, inst)
