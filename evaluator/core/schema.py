"""Strict validation of folder files: a pydantic model per file, unknown keys refused, and
every problem said in one line (`file: where: what`), with a did-you-mean for a misspelt key.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Annotated, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    WithJsonSchema,
)

from evaluator.core.errors import ConfigError

MAX_TEXT = 4000  # characters in one free-text value (descriptions, citations, metadata)


def _encodable(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("holds a lone surrogate (not valid Unicode)") from None
    return text


Text = Annotated[str, StringConstraints(max_length=MAX_TEXT), AfterValidator(_encodable)]
Name = Annotated[str, StringConstraints(min_length=1, max_length=200), AfterValidator(_encodable)]

# A bundle's or test set's id. It is also the name of its folder, of the files an export
# writes, of a site page, and a field of every stored row; one rule for all of them: a letter
# or digit, then letters, digits and `_.+:-` (no separator, no space, never "." or ".."; no
# `@`, `~` or `/`, which join an approach's and a split's ids into a system's,
# `APPROACH@SPLIT~SIZE/sSEED`).
ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+:-]{0,199}")


def _identifier(text: str) -> str:
    if not ID_PATTERN.fullmatch(text):
        raise ValueError("is not an id: a letter or digit, then letters, digits and _.+:- "
                         "(at most 200 characters)")
    return text


Identifier = Annotated[str, AfterValidator(_identifier),
                      WithJsonSchema({"type": "string", "pattern": f"^{ID_PATTERN.pattern}$"})]


class Strict(BaseModel):
    """A folder file's model: unknown keys are errors, values are not coerced across types."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, defer_build=True)


Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-fA-F]{64}$")]


def _inside(text: str) -> str:
    parts = text.replace("\\", "/").split("/")
    if text.startswith("/") or ".." in parts or "" in parts:
        raise ValueError("must be a relative path inside its folder (no leading /, no ..)")
    return text


def _web(text: str) -> str:
    if not re.fullmatch(r"https?://[^\s/]+\S*", text):
        raise ValueError("must be an http:// or https:// address")
    return text


class SourceRef(Strict):
    """A published file: its path inside a data mirror (or the bundle's folder), its sha256,
    and where it may be downloaded."""

    file: Annotated[Name, AfterValidator(_inside)]
    sha256: Sha256
    url: Annotated[Text, AfterValidator(_web)] | None = None
    size: Annotated[int, Field(gt=0)] | None = None


M = TypeVar("M", bound=BaseModel)


def validate(model: type[M], data: object, where: Path | str) -> M:
    """`data` as `model`, or a one-line ConfigError naming the first problem."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{where}: {describe(exc, model)}") from None


def describe(exc: ValidationError, model: type[BaseModel]) -> str:
    """The first problem, and which other keys have one (a union's members count once). An
    unknown key comes first: a misspelt key is also a required one missing, and the typo is
    the mistake to name."""
    errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
    first = _where(errors[0]["loc"])
    others = list(dict.fromkeys(_where(e["loc"]) for e in errors if _where(e["loc"]) != first))
    more = f" (and {len(others)} more: {', '.join(others)})" if others else ""
    return _line(errors[0], model) + more


def _where(loc: tuple) -> str:
    return ".".join(str(p) for p in loc if not _TAG.match(str(p))) or "(top level)"


_TAG = re.compile(r"^(function-\w+\[.*|constrained-\w+|(list|dict|literal|union|tagged-union|"
                  r"nullable)\[.*|str|int|float|bool|date|none|is-instance\[.*)$")


def _line(error: dict, model: type[BaseModel]) -> str:
    where = _where(error["loc"])  # pydantic names the union member it tried: keys only
    if error["type"] == "extra_forbidden":
        parent = _model_at(model, error["loc"][:-1])
        known = list(parent.model_fields) if parent is not None else []
        close = difflib.get_close_matches(str(error["loc"][-1]), known, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else \
            (f"; allowed: {', '.join(known)}" if known else "")
        return f"unknown key {where!r}{hint}"
    value = error.get("input")
    shown = repr(value) if not isinstance(value, (dict, list)) else type(value).__name__
    if len(shown) > 60:
        shown = shown[:57] + "..."
    message = error["msg"].lower().removeprefix("value error, ")  # a validator's own words
    return f"{where}: {message} (got {shown})"


def _model_at(model: type[BaseModel], loc: tuple) -> type[BaseModel] | None:
    """The nested model at `loc`, for naming the keys allowed there."""
    current: object = model
    for part in loc:
        fields = getattr(current, "model_fields", None)
        if fields is None or part not in fields:
            return None
        annotation = fields[part].annotation
        candidates = [annotation, *getattr(annotation, "__args__", ())]
        current = next((c for c in candidates if isinstance(c, type) and
                        issubclass(c, BaseModel)), None)
        if current is None:
            return None
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None
