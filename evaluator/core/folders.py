"""Folder registries: a test set or a submission is a folder holding one yaml file.

Discovery is a directory listing; there is no registration code to keep in sync.
"""

from __future__ import annotations

import copy
import difflib
import json
import math
import sys
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

import yaml

from evaluator.core import settings
from evaluator.core.errors import ConfigError, UnknownNameError
from evaluator.core.files import write_atomic
from evaluator.core.hashing import sha256_bytes, stat_key


def discover(root: Path, filename: str) -> dict[str, Path]:
    """Map folder name -> folder for every `root/<name>/<filename>`."""
    if not root.is_dir():
        return {}
    return {p.parent.name: p.parent for p in sorted(root.glob(f"*/{filename}"))}


MAX_YAML_BYTES = 256 << 10  # a folder file describes; data lives in data files


class _NoAliases(yaml.SafeLoader):
    """YAML without aliases: `*name` references are how a 1 KB file expands to gigabytes.
    Nor with a key given twice, of which YAML keeps the last silently: a second `command:`
    further down would be what runs, not what a reader of the first sees."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.YAMLError(f"aliases (*name) are not allowed (line {mark.line + 1})")
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        seen: set = set()
        for key_node, _value in node.value:
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, Hashable):
                continue  # refused by SafeLoader itself, with its own message
            if key in seen:
                raise yaml.YAMLError(f"key {key!r} is given twice (line "
                                     f"{key_node.start_mark.line + 1})")
            seen.add(key)
        return super().construct_mapping(node, deep)


_PARSED: dict[tuple, dict] = {}


def yaml_problem(exc: yaml.YAMLError) -> str:
    """A parser's error in one line, with where it stopped: `line 2, column 7: expected ',' or
    ']', but got '<stream end>' (while parsing a flow sequence)`."""
    if not isinstance(exc, yaml.MarkedYAMLError) or exc.problem is None:
        return str(exc).splitlines()[0]
    mark = exc.problem_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    context = f" ({exc.context})" if exc.context else ""
    return f"{where}{exc.problem}{context}"


def load_checked(text: str) -> object:
    """YAML text as _NoAliases reads it (no aliases, no key given twice), parsed by libyaml
    where PyYAML has it: the pure-Python parser takes a second for the 281 bundle files that
    `-b all` reads. The C parser's events are checked first (an alias, or a mapping whose
    keys outnumber its entries once built, is a key given twice); anything they find, or
    the C loader refuses, is read again by _NoAliases, which says what is wrong in its
    words (or builds it, as a YAML merge key `<<` makes a mapping of fewer entries)."""
    if not getattr(yaml, "__with_libyaml__", False):
        return yaml.load(text, Loader=_NoAliases)  # noqa: S506
    try:
        sizes = _mapping_sizes(yaml.parse(text, Loader=yaml.CSafeLoader))
        data = yaml.load(text, Loader=yaml.CSafeLoader)  # noqa: S506
    except yaml.YAMLError:
        sizes, data = None, None
    if sizes is None or list(_built_sizes(data)) != sizes:
        return yaml.load(text, Loader=_NoAliases)  # noqa: S506
    return data


def _mapping_sizes(events) -> list[int] | None:
    """The number of keys of each mapping, in document order; None at an alias."""
    sizes: list[int] = []
    stack: list[list] = []  # [index into sizes, expecting a key] per open mapping; None: a list
    for event in events:
        if isinstance(event, yaml.AliasEvent):
            return None
        if isinstance(event, (yaml.ScalarEvent, yaml.MappingStartEvent,
                              yaml.SequenceStartEvent)):
            top = stack[-1] if stack else None
            if top is not None:
                if top[1]:
                    sizes[top[0]] += 1
                top[1] = not top[1]
            if isinstance(event, yaml.MappingStartEvent):
                stack.append([len(sizes), True])
                sizes.append(0)
            elif isinstance(event, yaml.SequenceStartEvent):
                stack.append(None)
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            stack.pop()
    return sizes


def _built_sizes(data: object) -> Iterator[int]:
    """The number of entries of each mapping built, in document order."""
    if isinstance(data, dict):
        yield len(data)
        for value in data.values():
            yield from _built_sizes(value)
    elif isinstance(data, list):
        for item in data:
            yield from _built_sizes(item)


def read_yaml(path: Path) -> dict:
    """A folder's YAML file as a mapping: at most MAX_YAML_BYTES, UTF-8, no aliases. Parsed
    once per process while its `stat_key` stays the same (a study resolves each derived
    set's parent for every row), and once per content across processes (`_parsed_before`:
    `-b all` reads hundreds of bundle files at every start); each caller gets its own copy."""
    try:
        size = path.stat().st_size
        if size > MAX_YAML_BYTES:
            raise ConfigError(f"{path}: {size:,} bytes is over the {MAX_YAML_BYTES >> 10} KiB "
                              f"limit for folder files")
        key = stat_key(path)  # None for a file changed just now: parsed every time
        data = _PARSED.get(key) if key else None
        if data is None:
            raw = path.read_bytes()
            text = raw.decode("utf-8")
            data = _parsed_before(raw)
            if data is None:
                data = load_checked(text)
                if not isinstance(data, dict):
                    raise ConfigError(f"{path}: expected a mapping at the top level")
                _keep_parsed(raw, data)
            if key:
                _PARSED[key] = data
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({yaml_problem(exc)})") from None
    except (UnicodeDecodeError, OSError) as exc:
        raise ConfigError(f"{path}: cannot be read as UTF-8 text ({exc})") from None
    return copy.deepcopy(data)


def _parsed_path(raw: bytes) -> Path:
    digest = sha256_bytes(raw)
    return settings.cache_dir() / "parsed-yaml" / digest[:2] / f"{digest}.json"


def _parsed_before(raw: bytes) -> dict | None:
    """The mapping these bytes parsed to in an earlier process, kept under the cache by their
    sha256 (as trusted as the operator's cache itself), or None."""
    try:
        data = json.loads(_parsed_path(raw).read_bytes())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _keep_parsed(raw: bytes, data: dict) -> None:
    """Keep a parsed mapping for later processes, if JSON holds it exactly (a YAML date or
    binary value it does not: such a file is parsed each time)."""
    if not _plain(data):
        return
    try:
        write_atomic(_parsed_path(raw), json.dumps(data).encode())
    except OSError:
        pass  # a read-only cache: parsed each time


def _plain(value: object) -> bool:
    """Whether JSON gives `value` back as it is: str-keyed dicts, lists, strings, finite
    numbers, booleans and None only."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, (str, int, bool))


LIST_COMMANDS = {"bundle": "qashift bundles list", "test set": "qashift testsets list"}


def unknown_name(kind: str, name: str, choices: Iterable[str]) -> UnknownNameError:
    """An error naming the closest choices (every choice when there are few)."""
    choices = sorted(choices)
    close = difflib.get_close_matches(name, choices, n=5, cutoff=0.6)
    command = LIST_COMMANDS.get(kind)
    if len(choices) <= 12 or command is None:
        listed = f"choices: {', '.join(choices)}"
    else:
        listed = f"{len(choices)} {kind}s; list them with `{command}`"
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    return UnknownNameError(f"unknown {kind} {name!r}: {hint}{listed}")


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
    in_all: Callable[[T], bool] = lambda _: True  # which folders 'all' stands for
    variable: str = ""  # the environment variable that names the folders' root

    def available(self, root: Path | None = None) -> dict[str, Path]:
        return discover(root or self.default_root(), self.filename)

    def none_here(self, root: Path | None = None) -> str:
        """Where the folders were looked for, and how to point there: what an installed
        package run outside a checkout says instead of an empty list of choices."""
        return (f"no {self.kind} folders in {root or self.default_root()}: run qashift from a "
                f"checkout of its repository, or point QASHIFT_ROOT at one (or "
                f"{self.variable or 'the settings'} at a folder of {self.kind} folders)")

    def get(self, name: str, root: Path | None = None) -> T:
        folder = (root or self.default_root()) / name
        if "/" in name or name in ("", ".", "..") or not (folder / self.filename).is_file():
            choices = self.available(root)
            if not choices:
                raise UnknownNameError(f"unknown {self.kind} {name!r}: {self.none_here(root)}")
            raise unknown_name(self.kind, name, choices)
        return self.load(folder)

    def resolve(self, names: list[str], root: Path | None = None,
                on_broken: Callable[[str, ConfigError], None] | None = None) -> list[T]:
        """The named folders, loaded ('all' for every one). A broken folder named explicitly
        raises its error; one reached through 'all' is skipped and handed to `on_broken`
        (default: a warning on stderr), so one bad folder never hides the others."""
        folders = self.available(root)
        if not folders and names:
            raise UnknownNameError(f"unknown {self.kind} {names[0]!r}: {self.none_here(root)}")
        explicit = {n for n in names if n != "all"}
        out = []
        for name in expand(self.kind, names, folders):
            try:
                loaded = self.load(folders[name])
            except ConfigError as exc:
                if name in explicit:
                    raise
                (on_broken or self._warn)(name, exc)
                continue
            if name in explicit or self.in_all(loaded):
                out.append(loaded)
        return out

    def scan(self, root: Path | None = None) -> tuple[dict[str, T], dict[str, str]]:
        """({id: loaded} for the good folders, {id: one-line problem} for the broken ones)."""
        good, broken = {}, {}
        for name, folder in self.available(root).items():
            try:
                good[name] = self.load(folder)
            except ConfigError as exc:
                broken[name] = str(exc)
        return good, broken

    def _warn(self, name: str, error: ConfigError) -> None:
        print(f"warning: skipping broken {self.kind} {name}: {error}", file=sys.stderr)
