"""Folder registries: a test set or a submission is a folder holding one yaml file.

Discovery is a directory listing; there is no registration code to keep in sync.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

import yaml

from evaluator.core.errors import ConfigError, UnknownNameError


def discover(root: Path, filename: str) -> dict[str, Path]:
    """Map folder name -> folder for every `root/<name>/<filename>`."""
    if not root.is_dir():
        return {}
    return {p.parent.name: p.parent for p in sorted(root.glob(f"*/{filename}"))}


def read_yaml(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return data


def require(data: dict, keys: Iterable[str], where: Path) -> None:
    missing = [k for k in keys if k not in data]
    if missing:
        raise ConfigError(f"{where}: missing required field(s): {', '.join(missing)}")


def unknown_name(kind: str, name: str, choices: Iterable[str]) -> UnknownNameError:
    choices = sorted(choices)
    close = difflib.get_close_matches(name, choices, n=3, cutoff=0.75)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    return UnknownNameError(f"unknown {kind} {name!r}: {hint}choices: {', '.join(choices)}")


def expand(kind: str, names: Iterable[str], choices: Iterable[str]) -> list[str]:
    """Resolve user-given names ('all' allowed), keeping order and dropping repeats."""
    choices = list(choices)
    out: list[str] = []
    for name in names:
        for resolved in choices if name == "all" else [name]:
            if resolved not in choices:
                raise unknown_name(kind, resolved, choices)
            if resolved not in out:
                out.append(resolved)
    return out


T = TypeVar("T")


@dataclass(frozen=True)
class FolderRegistry(Generic[T]):
    """Folders `<root>/<id>/<filename>` loaded by `load`: what test sets and bundles share."""

    kind: str  # "test set", "bundle": for messages
    filename: str
    default_root: Callable[[], Path]
    load: Callable[[Path], T]

    def available(self, root: Path | None = None) -> dict[str, Path]:
        return discover(root or self.default_root(), self.filename)

    def get(self, name: str, root: Path | None = None) -> T:
        folders = self.available(root)
        if name not in folders:
            raise unknown_name(self.kind, name, folders)
        return self.load(folders[name])

    def resolve(self, names: list[str], root: Path | None = None) -> list[T]:
        folders = self.available(root)
        return [self.load(folders[n]) for n in expand(self.kind, names, folders)]
