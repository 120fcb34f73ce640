"""Outputs kept with the digest of what made them: an analysis writes its files into a
folder, then a key file last (the digest of its input files, settings and code), and is
served from there while the key is the same. A run killed half-way left no key, so it is
computed again."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from evaluator.core.files import write_atomic
from evaluator.core.hashing import canonical_json, sha256_bytes


def inputs_key(paths: Sequence[Path], settings: dict, code: Sequence[Path]) -> str:
    """The digest of everything a result depends on: input files, settings, code."""
    parts = [[str(p.name), sha256_bytes(p.read_bytes())] for p in [*paths, *code]]
    return sha256_bytes(canonical_json({"files": parts, "settings": settings}))


def is_current(out: Path, name: str, key: str) -> bool:
    """Whether `out` holds the outputs of exactly these inputs (its key file says `key`)."""
    try:
        return (out / name).read_text().strip() == key
    except OSError:
        return False


def unseal(out: Path, name: str) -> None:
    """Before writing: the folder's outputs are no longer those of any key."""
    out.mkdir(parents=True, exist_ok=True)
    (out / name).unlink(missing_ok=True)


def seal(out: Path, name: str, key: str) -> None:
    """After every output is written: they are those of `key`."""
    write_atomic(out / name, (key + "\n").encode())
