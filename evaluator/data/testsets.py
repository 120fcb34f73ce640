"""Test-set registry: `testsets/<id>/testset.yaml` describes a set; this module loads and checks it.

A test set's identity is the sha256 of its data file. Loading verifies the hash, parses the
SQuAD-format JSON and checks the question count, so a wrong or truncated file is caught
before anything is run or scored. `input_document` is what a submission sees: the same
file with every answer removed.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from evaluator.core import folders as registry
from evaluator.core import settings
from evaluator.core.errors import ConfigError, DataError
from evaluator.core.gate import Refused, parse_json
from evaluator.core.hashing import file_sha256, sha256_bytes
from evaluator.core.schema import validate
from evaluator.data import checks
from evaluator.data import derive as derive_mod
from evaluator.data.derive import DeriveSpec
from evaluator.data.fetch import Source, fetch
from evaluator.data.schema import TestSetFile


@dataclass(frozen=True)
class Question:
    """One gold question: what the scorer needs, nothing a submission sees."""

    id: str
    answers: tuple[str, ...]
    paragraph: str
    article: str


@dataclass(frozen=True)
class Dataset:
    """A parsed, verified test-set file."""

    raw: dict = field(repr=False)
    questions: tuple[Question, ...]
    sha256: str

    def limited(self, n: int, seed: int) -> Dataset:
        """`n` questions drawn with `seed`, stratified by article (each article keeps its
        share, by largest remainder), in file order: a quick look, never a full result."""
        if n >= len(self.questions):
            return self
        by_article: dict[str, list[int]] = {}
        for index, q in enumerate(self.questions):
            by_article.setdefault(q.article, []).append(index)
        total = len(self.questions)
        shares = {a: n * len(ix) / total for a, ix in by_article.items()}
        counts = {a: int(s) for a, s in shares.items()}
        for a in sorted(shares, key=lambda a: (counts[a] - shares[a], a))[:n - sum(
                counts.values())]:
            counts[a] += 1
        rng = random.Random(seed)
        keep = set()
        for article, indexes in by_article.items():
            keep.update(rng.sample(indexes, counts[article]))
        ids = {self.questions[i].id for i in keep}
        # only the paragraphs (and articles) that keep a question: a system reads, and an
        # approach prepares, a hundred passages for a hundred questions, not the whole set
        articles = [{**a, "paragraphs": [
            {**p, "qas": [qa for qa in p["qas"] if str(qa["id"]) in ids]}
            for p in a["paragraphs"] if any(str(qa["id"]) in ids for qa in p["qas"])]}
            for a in self.raw["data"]]
        raw = {**self.raw, "data": [a for a in articles if a["paragraphs"]]}
        return Dataset(raw, tuple(q for i, q in enumerate(self.questions) if i in keep),
                       self.sha256)


def next_version(version: str) -> str:
    """The version after `version`: its last number raised ('1' -> '2', '1.2' -> '1.3'), or
    '.2' added where it ends in no number."""
    head, number = re.fullmatch(r"(.*?)(\d*)", str(version)).groups()
    return f"{head}{int(number) + 1}" if number else f"{version}.2"


@dataclass(frozen=True)
class TestSet:
    id: str
    name: str
    version: str
    kind: str
    reference: str | None
    questions: int
    scorer: str
    cluster: str
    license: str
    citation: str
    folder: Path
    source: Source | None = None
    data_file: str | None = None
    description: str = ""
    derive: DeriveSpec | None = None  # generated from a parent (or from nothing) on first use
    train: str | None = None  # the training split of this test split (approach-level runs)
    label: str | None = None  # the short name figures print
    pinned: str | None = None  # `sha256:` of a folder's own data file or of its generated data
    unaligned_answers: str | None = None  # the stated reason answers may move

    @property
    def sha256(self) -> str:
        """The identity of the data: the declared hash (a source's, or the pin of a derived
        set, whose bytes are checked against it whenever they are generated), or the hash of
        the file in the folder. A pinned derived set is not generated to be named."""
        if self.source is not None:
            return self.source.sha256
        if self.derive is not None:
            return self.pinned.lower() if self.pinned else self.derived().sha256
        path = self.local_path()
        actual = file_sha256(path)
        if self.pinned is not None and actual != self.pinned.lower():
            raise DataError(f"test set {self.id!r}: {path} was changed after it was pinned "
                            f"(sha256 {actual[:12]}, testset.yaml pins {self.pinned[:12]}); "
                            f"if the change is meant, pin it anew: {self.repin_command()}")
        return actual

    def repin_command(self) -> str:
        """The command that pins this set's data as it is now, under the next version: a pin
        is only moved with a new version, so the same version would be refused."""
        return f"`qashift validate --pin --version {next_version(self.version)} {self.folder}`"

    def local_path(self, mirrors: list[Path] | None = None) -> Path:
        if self.source is not None:
            return fetch(self.source, f"test set {self.id!r}", mirrors)
        if self.derive is not None:
            return self.derived(mirrors).path
        path = self.folder / self.data_file
        if not path.is_file():
            raise DataError(f"test set {self.id!r}: data file {path} is missing")
        return path

    def derived(self, mirrors: list[Path] | None = None) -> derive_mod.Derived:
        """A derived set's cached file and provenance, generating it from its parent first."""
        spec = self.derive
        if spec is None:
            raise ConfigError(f"test set {self.id!r} is not derived")
        if spec.parent is None:
            return self._as_pinned(derive_mod.materialize(spec, self.id))
        _check_derive_chain(self)
        parents = [get(name).load(mirrors) for name in spec.parents]
        if len(parents) == 1:
            return self._as_pinned(derive_mod.materialize(spec, self.id, parents[0].raw,
                                                          parents[0].sha256))
        joined = {"version": parents[0].raw.get("version", ""),
                  "data": [a for p in parents for a in p.raw["data"]]}
        shas = "+".join(p.sha256 for p in parents)
        return self._as_pinned(derive_mod.materialize(spec, self.id, joined,
                                                      sha256_bytes(shas.encode())))

    def _as_pinned(self, derived: derive_mod.Derived) -> derive_mod.Derived:
        """A generated set is the one its folder pins, or an error: tables of results name
        the bytes they were scored on, and a generator that gives other bytes on another
        machine (or after a change to its code or its parent) must not pass for the same
        set."""
        if self.pinned is not None and derived.sha256 != self.pinned.lower():
            raise DataError(f"test set {self.id!r}: generated data differs from its pin "
                            f"(sha256 {derived.sha256[:12]}, testset.yaml pins "
                            f"{self.pinned[:12]}); the generator, its parent or this "
                            f"machine's numerics gave other bytes. If the change is meant, "
                            f"pin it anew: {self.repin_command()}")
        return derived

    @property
    def answers_aligned(self) -> bool:
        """Whether every answer must stand at its answer_start: a set's own or fetched data,
        unless its folder states why not (a derived set is checked by its transform)."""
        return self.derive is None and not self.unaligned_answers

    def load(self, mirrors: list[Path] | None = None, keep: bool = True) -> Dataset:
        """The verified questions; kept for the rest of the process unless `keep` is False
        (for a caller that bounds what it holds itself, as `store.units.Gold` does)."""
        path = self.local_path(mirrors)
        sha = self.sha256 if self.source is None and self.derive is None else file_sha256(path)
        return (_load_dataset if keep else _read_dataset)(
            str(path), self.id, self.questions, self.cluster, sha, self.answers_aligned)


MAX_DERIVE_DEPTH = 16


def _check_derive_chain(start: TestSet) -> None:
    """Refuse a derive chain that loops (a -> b -> a) or is deeper than MAX_DERIVE_DEPTH, in
    one line naming the chain, before anything is generated."""
    stack = [(start, (start.id,))]
    while stack:
        testset, chain = stack.pop()
        for name in testset.derive.parents if testset.derive is not None else ():
            if name in chain:
                raise ConfigError(f"{start.folder / 'testset.yaml'}: derive.from loops: "
                                  f"{' -> '.join((*chain, name))}")
            if len(chain) >= MAX_DERIVE_DEPTH:
                raise ConfigError(f"{start.folder / 'testset.yaml'}: derive chain deeper "
                                  f"than {MAX_DERIVE_DEPTH} sets: {' -> '.join(chain[:4])} ...")
            stack.append((get(name), (*chain, name)))


def read_document(path: Path | str, set_id: str) -> dict:
    """A test set's JSON file, through the bounded parser (`gate.parse_json`): data nested
    deeper than it allows, not UTF-8, with NaN or a lone surrogate is a one-line DataError,
    as is a file that is not valid JSON. A set's data comes from anyone who wrote a folder
    or a mirror, and the checks, the scorer and every writer after this walk it."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise DataError(f"test set {set_id!r}: {path} cannot be read ({exc.strerror})"
                        ) from None
    try:
        return parse_json(data, str(path))
    except Refused as exc:
        raise DataError(f"test set {set_id!r}: {exc}; the file is truncated or corrupt: "
                        f"replace it") from None


def _read_dataset(path: str, set_id: str, expected: int, cluster: str, sha256: str,
                  aligned: bool = True) -> Dataset:
    raw = read_document(path, set_id)
    found = checks.problems(raw, path, expected=expected, aligned=aligned)
    if found:
        more = f" (and {len(found) - 1} more: qashift validate)" if len(found) > 1 else ""
        raise DataError(f"test set {set_id!r}: {found[0]}{more}")
    questions = parse_questions(raw, set_id)
    return Dataset(raw=raw, questions=tuple(questions), sha256=sha256)


_load_dataset = cache(_read_dataset)  # a matrix loads each set once per process


def parse_questions(raw: dict, set_id: str = "?") -> list[Question]:
    """Gold questions in file order (the order the official script sums in)."""
    try:
        out = []
        for a_index, article in enumerate(raw["data"]):
            title = article.get("title", f"article-{a_index}")
            for p_index, paragraph in enumerate(article["paragraphs"]):
                para_key = f"{a_index}:{p_index}"
                if not isinstance(paragraph["context"], str):
                    raise TypeError("context")
                for qa in paragraph["qas"]:
                    if not isinstance(qa["question"], str):
                        raise TypeError(f"question of {qa.get('id')!r}")
                    answers = tuple(a["text"] for a in qa.get("answers", []))
                    out.append(Question(str(qa["id"]), answers, para_key, f"{a_index}:{title}"))
        return out
    except (KeyError, TypeError, AttributeError) as exc:
        raise DataError(f"test set {set_id!r}: not a SQuAD-format file (bad or missing {exc})"
                        ) from None


def first_questions(raw: dict, size: int) -> dict:
    """A SQuAD document cut after its first `size` questions (paragraphs kept whole-context)."""
    data, left = [], size
    for article in raw["data"]:
        paragraphs = []
        for paragraph in article["paragraphs"]:
            if left <= 0:
                break
            qas = paragraph["qas"][:left]
            left -= len(qas)
            paragraphs.append({"context": paragraph["context"], "qas": qas})
        if paragraphs:
            data.append({"title": article.get("title", ""), "paragraphs": paragraphs})
        if left <= 0:
            break
    return {"version": raw.get("version", ""), "data": data}


def input_document(raw: dict) -> dict:
    """The file a submission reads: titles, contexts, ids and questions; no answers at all."""
    return {
        "version": raw.get("version", ""),
        "data": [
            {
                "title": article.get("title", ""),
                "paragraphs": [
                    {
                        "context": paragraph["context"],
                        "qas": [{"id": qa["id"], "question": qa["question"]}
                                for qa in paragraph["qas"]],
                    }
                    for paragraph in article["paragraphs"]
                ],
            }
            for article in raw["data"]
        ],
    }


def from_folder(folder: Path) -> TestSet:
    where = folder / "testset.yaml"
    spec = validate(TestSetFile, registry.read_yaml(where), where)
    if spec.id != folder.name:
        raise ConfigError(f"{where}: id {spec.id!r} must equal the folder name {folder.name!r}")
    given = [k for k in ("derive", "source", "file") if getattr(spec, k) is not None]
    if len(given) != 1:
        raise ConfigError(f"{where}: give exactly one of source: {{file, sha256, url}}, "
                          f"file: NAME or derive: {{from, transform, params, seed}}"
                          + (f" (got {', '.join(given)})" if given else ""))
    if spec.sha256 is not None and spec.source is not None:
        raise ConfigError(f"{where}: sha256 pins a folder's own data file (file: NAME) or "
                          f"its generated data (derive); a fetched set pins it in "
                          f"source.sha256")
    derive = DeriveSpec.from_yaml(spec.derive, where) if spec.derive is not None else None
    source = None
    if spec.source is not None:
        src = spec.source
        source = Source(src.file, src.sha256.lower(), src.url, src.size)
    reference = spec.reference if "reference" in spec.model_fields_set else \
        (derive.parent if derive is not None else None)
    return TestSet(
        id=spec.id, name=spec.name, version=str(spec.version), kind=spec.kind,
        reference=reference, questions=spec.questions, scorer=spec.scorer,
        cluster=spec.cluster, license=spec.license, citation=spec.citation.strip(),
        folder=folder, source=source, data_file=spec.file,
        description=spec.description.strip(), derive=derive, train=spec.train,
        label=spec.label, pinned=spec.sha256, unaligned_answers=spec.unaligned_answers,
    )


_REGISTRY = registry.FolderRegistry("test set", "testset.yaml", settings.testsets_dir,
                                     lambda folder: from_folder(folder),
                                     in_all=lambda ts: ts.kind != "training",
                                     variable="QASHIFT_TESTSETS")
available, get, resolve, scan, none_here = (
    _REGISTRY.available, _REGISTRY.get, _REGISTRY.resolve, _REGISTRY.scan, _REGISTRY.none_here)
