"""Scorers, registered by name: what a test set's `scorer:` names.

A scorer turns a prediction and a question's gold answers into (EM, F1) in [0, 1] and may
then combine the per-question units into the units a set is scored on (adversarial-min's
question groups). Its version is stored with every result and enters the cell's key, so a
changed scorer re-scores nothing silently. A new scorer is one module in this package with
a `@register(...)` function; it is found by scanning the package, as derive generators are.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass

from evaluator.core.errors import UserError


@dataclass(frozen=True)
class Scorer:
    name: str
    version: str
    """Stored with every result and part of its cell's key: bump it when scores change."""
    question: Callable | None = None
    """(prediction or None, gold answers) -> (EM, F1) in [0, 1]; None: SQuAD v1.1's."""
    combine: Callable | None = None
    """Per-question units -> the units the set is scored on; None: each question."""
    units: str = "questions"
    """What a result's n counts."""


_REGISTRY: dict[str, Scorer] = {}


def register(name: str, *, version: str, question: Callable | None = None,
             units: str = "questions") -> Callable:
    """Decorator of a scorer's `combine` function (or call it with a function of None to
    register a scorer that scores each question alone: `register(...)(None)`)."""
    def wrap(combine: Callable | None) -> Callable | None:
        known = _REGISTRY.get(name)
        if known is not None and known.version != version:
            raise ValueError(f"scorer {name!r} registered twice")
        _REGISTRY[name] = Scorer(name, version, question, combine, units)
        return combine
    return wrap


def scorers() -> dict[str, Scorer]:
    """Every scorer, its module imported on first use."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
    return dict(_REGISTRY)


def get(name: str) -> Scorer:
    found = _REGISTRY.get(name) or scorers().get(name)
    if found is None:
        raise UserError(f"unknown scorer {name!r}; choices: {', '.join(sorted(scorers()))}")
    return found


def version(name: str) -> str:
    """The version a result of scorer `name` is stored under."""
    return get(name).version
