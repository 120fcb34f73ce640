"""Derived and generated test sets: `derive: {from, transform, params, seed}` in a testset.yaml.

A transform is a registered pure function of (parent data, params, rng). Its output is
generated on first use and cached under a key made of everything that can change its bytes:
the parent's sha256, the transform's name and version, the params, the seed and the versions
of the tools it uses (a tagger, a word list). A provenance record is written next to the
cached file, so a derived number can always be traced back to its inputs. A generated set
(SAM) is the same thing without a parent.

`from` may be a list: the parents' articles are concatenated, in order, into the one parent
the transform sees, and the key holds every parent's sha256 (a training split plus extra data).

`seed` may be a list: the file then holds one copy of every question per seed, ids suffixed
`@s<seed>`, so one evaluation gives the mean over seeds and the report splits it per seed.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from evaluator.core import settings
from evaluator.core.errors import ConfigError, DataError
from evaluator.core.files import write_atomic
from evaluator.core.folders import unknown_name
from evaluator.core.hashing import canonical_json, sha256_bytes

SEED_SEPARATOR = "@s"

# (parent raw or None, params, rng) -> (raw, stats)
TransformFn = Callable[[dict | None, dict, random.Random], tuple[dict, dict]]


@dataclass(frozen=True)
class Transform:
    """A registered transform; `tools()` names every external tool and version it uses."""

    name: str
    fn: TransformFn
    version: str
    needs_parent: bool
    tools: Callable[[], dict[str, str]]
    description: str


_REGISTRY: dict[str, Transform] = {}


def register(name: str, *, version: str = "1", needs_parent: bool = True,
             tools: Callable[[], dict[str, str]] | None = None) -> Callable[[TransformFn],
                                                                          TransformFn]:
    """Decorator: add a transform to the registry under `name`."""
    def wrap(fn: TransformFn) -> TransformFn:
        if name in _REGISTRY and _REGISTRY[name].fn is not fn:
            raise ValueError(f"transform {name!r} registered twice")
        doc = (fn.__doc__ or "").strip().splitlines()
        _REGISTRY[name] = Transform(name, fn, version, needs_parent,
                                    tools or (lambda: {}), doc[0] if doc else "")
        return fn
    return wrap


def transforms() -> dict[str, Transform]:
    """Every registered transform: each module in this folder registers its own when imported,
    so a new generator is a new file here and nothing else."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
    return dict(_REGISTRY)


def get_transform(name: str) -> Transform:
    found = transforms()
    if name not in found:
        raise unknown_name("transform", name, found)
    return found[name]


@dataclass(frozen=True)
class DeriveSpec:
    """What a folder's `derive:` block says: parent id (None when generated), transform, params,
    and one seed or several."""

    parent: str | None
    transform: str
    params: dict = field(default_factory=dict)
    seeds: tuple[int, ...] = (0,)
    stacked: bool = False  # True when the yaml gave a list of seeds
    more_parents: tuple[str, ...] = ()  # `from: [a, b, ...]`: b, ... after a

    @property
    def parents(self) -> tuple[str, ...]:
        return () if self.parent is None else (self.parent, *self.more_parents)

    @classmethod
    def from_yaml(cls, block: object, where: Path) -> DeriveSpec:
        if not isinstance(block, dict) or "transform" not in block:
            raise ConfigError(f"{where}: derive needs at least transform (and from, params, "
                              f"seed)")
        unknown = sorted(set(block) - {"from", "transform", "params", "seed"})
        if unknown:
            raise ConfigError(f"{where}: unknown key 'derive.{unknown[0]}'; allowed: from, "
                              f"transform, params, seed")
        params = block.get("params") or {}
        if not isinstance(params, dict):
            raise ConfigError(f"{where}: derive.params must be a mapping")
        for key, value in params.items():
            if (why := _unbounded(value)) is not None:
                raise ConfigError(f"{where}: derive.params.{key} {why}")
        seed = block.get("seed", 0)
        seeds = seed if isinstance(seed, list) else [seed]
        if not seeds or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
            raise ConfigError(f"{where}: derive.seed must be an integer or a list of integers")
        if len(set(seeds)) != len(seeds):
            raise ConfigError(f"{where}: derive.seed lists a seed twice")
        parents = block.get("from")
        parents = parents if isinstance(parents, list) else [] if parents is None else [parents]
        if len(set(map(str, parents))) != len(parents) or (
                isinstance(block.get("from"), list) and not parents):
            raise ConfigError(f"{where}: derive.from must name each parent once")
        return cls(str(parents[0]) if parents else None, str(block["transform"]),
                   dict(params), tuple(seeds), isinstance(seed, list),
                   tuple(map(str, parents[1:])))

    def to_dict(self) -> dict:
        seed: object = list(self.seeds) if self.stacked else self.seeds[0]
        parents: object = list(self.parents) if self.more_parents else self.parent
        return {"from": parents, "transform": self.transform, "params": self.params,
                "seed": seed}


@dataclass(frozen=True)
class Derived:
    """A materialised derived file and its provenance."""

    path: Path
    sha256: str
    provenance: dict


MAX_PARAM = 1_000_000  # no generator needs a count, size or length beyond this
MAX_ITEMS = 10_000


def _unbounded(value: object) -> str | None:
    """Why a generator parameter is out of bounds (a count that would hang the machine, a
    non-finite number, a list too long), or None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        if value != value or value in (float("inf"), float("-inf")):
            return "must be a finite number"
        if abs(value) > MAX_PARAM:
            return f"is {value:,}, beyond the {MAX_PARAM:,} any generator takes"
    if isinstance(value, list | dict):
        items = list(value.values()) if isinstance(value, dict) else value
        if len(items) > MAX_ITEMS:
            return f"holds {len(items):,} items, beyond the {MAX_ITEMS:,} allowed"
        return next((why for item in items if (why := _unbounded(item)) is not None), None)
    return None


def cache_key(parent_sha256: str | None, spec: DeriveSpec, transform: Transform,
              tools: dict[str, str]) -> str:
    material = {"parent_sha256": parent_sha256, "transform": spec.transform,
                "transform_version": transform.version, "params": spec.params,
                "seeds": list(spec.seeds), "stacked": spec.stacked, "tools": tools}
    return sha256_bytes(canonical_json(material))


def generate(spec: DeriveSpec, parent_raw: dict | None) -> tuple[dict, dict]:
    """Run the transform once per seed; several seeds are stacked into one file."""
    transform = get_transform(spec.transform)
    if transform.needs_parent and parent_raw is None:
        raise ConfigError(f"transform {spec.transform!r} needs a parent test set (derive.from)")
    if not transform.needs_parent and spec.parent is not None:
        raise ConfigError(f"transform {spec.transform!r} generates data: drop derive.from")
    if not spec.stacked:
        return transform.fn(parent_raw, spec.params, random.Random(spec.seeds[0]))
    articles, stats = [], {}
    version = ""
    for seed in spec.seeds:
        raw, seed_stats = transform.fn(parent_raw, spec.params, random.Random(seed))
        version = raw.get("version", "")
        stats[str(seed)] = seed_stats
        for article in raw["data"]:
            paragraphs = [{**p, "qas": [{**qa, "id": f"{qa['id']}{SEED_SEPARATOR}{seed}"}
                                        for qa in p["qas"]]} for p in article["paragraphs"]]
            articles.append({**article, "title": f"{article.get('title', '')} (seed {seed})",
                             "paragraphs": paragraphs})
    return {"version": version, "data": articles}, {"per_seed": stats}


def materialize(spec: DeriveSpec, set_id: str, parent_raw: dict | None = None,
                parent_sha: str | None = None) -> Derived:
    """The cached derived file for `spec`, generating it (and its provenance) on first use.

    The caller loads the parent (`spec.parent`) and passes its data and sha256: this module
    knows transforms, not the test-set registry."""
    transform = get_transform(spec.transform)
    if (spec.parent is None) != (parent_raw is None):
        raise ConfigError(f"test set {set_id!r}: give the parent's data exactly when "
                          f"derive.from names one")
    tools = transform.tools()
    key = cache_key(parent_sha, spec, transform, tools)
    folder = settings.cache_dir() / "derived" / key
    data_path, prov_path = folder / "data.json", folder / "provenance.json"
    memo = _MEMO.get(str(data_path))
    if memo is not None and data_path.is_file() and _stamp(data_path) == memo[1]:
        return memo[0]  # verified earlier in this process and unchanged since
    if data_path.is_file() and prov_path.is_file():
        provenance = json.loads(prov_path.read_text(encoding="utf-8"))
        sha = sha256_bytes(data_path.read_bytes())
        if sha == provenance.get("sha256"):
            return _remember(Derived(data_path, sha, provenance))
    started = time.perf_counter()
    raw, stats = generate(spec, parent_raw)
    check_generated(raw, set_id)
    data = canonical_json(raw)
    sha = sha256_bytes(data)
    provenance = {
        "testset": set_id, "cache_key": key, "sha256": sha, "bytes": len(data),
        "derive": spec.to_dict(), "parent": spec.parent, "parents": list(spec.parents),
        "parent_sha256": parent_sha,
        "transform": {"name": transform.name, "version": transform.version,
                      "description": transform.description},
        "tools": tools, "stats": stats,
        "generated_in_s": round(time.perf_counter() - started, 3),
    }
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(data_path, data)
    write_atomic(prov_path, json.dumps(provenance, indent=2, sort_keys=True).encode())
    return _remember(Derived(data_path, sha, provenance))


_MEMO: dict[str, tuple[Derived, tuple[int, int]]] = {}


def _stamp(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_mtime_ns, stat.st_size


def _remember(made: Derived) -> Derived:
    _MEMO[str(made.path)] = (made, _stamp(made.path))
    return made


def base_question_id(question_id: str) -> tuple[str, int | None]:
    """Split a stacked id `<id>@s<seed>` into (id, seed); plain ids give (id, None)."""
    head, sep, tail = question_id.rpartition(SEED_SEPARATOR)
    if sep and tail.lstrip("-").isdigit():
        return head, int(tail)
    return question_id, None


def check_generated(raw: dict, set_id: str) -> None:
    """Refuse a transform output that is not a SQuAD-format file (a bug, never user data)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("data"), list):
        raise DataError(f"test set {set_id!r}: the transform produced no SQuAD-format data")
