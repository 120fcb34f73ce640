"""A frozen system as an attacker may shape what surrounds it: a manifest edited along with its
weights (a packed file that declares a huge size), or another store, imported, holding other
weights under the frozen system's train key. The repository's frozen system, verified, is what
runs, and unpacking it never takes more memory or disk than the gate allows a file."""

from __future__ import annotations

import hashlib
import json
import lzma
import os
import time
import tracemalloc
from pathlib import Path

import pytest

from evaluator.core.errors import UserError
from evaluator.core.gate import Limits, walk
from evaluator.core.hashing import canonical_json
from evaluator.store.store import Store
from evaluator.store.transfer import import_store
from evaluator.training import frozen
from evaluator.training.run import stored
from evaluator.training.systems import trained_rows
from tests.support.approaches import WORDS, approach_registry, train_job


def packed_artifact(base: Path, content: bytes, declared: dict[str, int]) -> Path:
    """A frozen folder under `base` whose files `declared` names are all stored packed (each
    the xz of `content`), each declaring the size given; its manifest names the digest and
    sha256 of the honest unpacked files."""
    folder = base / "approach" / "split" / "s0"
    (folder / frozen.WEIGHTS).mkdir(parents=True)
    small = lzma.compress(content, preset=0)
    plain = base / "plain"
    plain.mkdir()
    for rel in declared:
        (folder / frozen.WEIGHTS / (rel + frozen.PACKED)).write_bytes(small)
        (plain / rel).write_bytes(content)
    digest = walk(plain).digest
    for rel in declared:
        (plain / rel).unlink()
    plain.rmdir()
    sha = hashlib.sha256(content).hexdigest()
    entry = {"bytes": len(small), "sha256": hashlib.sha256(small).hexdigest()}
    manifest = {"format": frozen.FORMAT, "system": {"key": "k", "weights_digest": digest},
                "files": {rel: sha for rel in declared}, "bytes": len(content) * len(declared),
                "packed": {rel: {**entry, "size": size} for rel, size in declared.items()},
                "scores": {}}
    (folder / frozen.MANIFEST).write_text(json.dumps(manifest))
    return folder


@pytest.mark.parametrize("declared, why", [
    ({"lexical.npy": Limits.file_bytes + 1},
     r"weights/lexical\.npy\.xz declares 4,294,967,297 bytes unpacked, over the "
     r"4,294,967,296 allowed per file; refused"),
    ({f"part{i}.npy": Limits.file_bytes for i in range(5)},
     r"its packed files declare 21,474,836,480 bytes unpacked, over the 17,179,869,184 "
     r"allowed in all; refused"),
], ids=["one-file", "all-files"])
def test_a_packed_file_declared_larger_than_the_file_limit_is_refused_naming_it(
        tmp_path, workspace, monkeypatch, declared, why):
    """The declared size bounds what unpacking writes: one the store would refuse is refused
    as the manifest is read, before a byte is unpacked."""
    monkeypatch.setenv("QASHIFT_FROZEN", str(tmp_path / "frozen"))
    folder = packed_artifact(tmp_path / "frozen", b"\0" * 1024, declared)
    with pytest.raises(UserError, match=why) as listed:
        frozen.manifests()
    assert str(listed.value).startswith(f"frozen system {folder}: ")
    assert "\n" not in str(listed.value)
    store = Store(workspace)
    with pytest.raises(UserError, match=why):
        frozen.weights_of(folder, store)
    assert not (workspace / "models").exists()


def test_a_packed_file_is_unpacked_in_a_stream_never_whole_in_memory(tmp_path, workspace,
                                                                     monkeypatch):
    """A packed file may declare up to the gate's file limit (4 GiB): unpacking it whole in
    memory would let a 300 KiB file take that much. It goes to disk piece by piece."""
    size = 32 << 20
    monkeypatch.setenv("QASHIFT_FROZEN", str(tmp_path / "frozen"))
    folder = packed_artifact(tmp_path / "frozen", b"\0" * size, {"lexical.npy": size})
    store = Store(workspace)
    tracemalloc.start()
    try:
        unpacked = frozen.weights_of(folder, store)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (unpacked / "lexical.npy").stat().st_size == size  # checked against its digest
    assert peak < size / 4, f"{peak:,} bytes held at once unpacking a {size:,}-byte file"


@pytest.mark.parametrize("replace, why", [
    (lambda path: path.write_bytes(path.read_bytes() + b"\0" * 64),
     r"\(it holds [\d,]+ bytes, over the [\d,]+ allowed\); refused"),
    (lambda path: (path.unlink(), os.mkfifo(path)),
     r"\(it is a FIFO, not a regular file\); refused"),
], ids=["longer-than-declared", "fifo"])
def test_a_stored_file_that_is_not_the_regular_file_its_manifest_declares_is_refused(
        tmp_path, workspace, monkeypatch, replace, why):
    """Read through the gate's streaming reader: never more than its declared bytes, never a
    FIFO that would hang the reader."""
    monkeypatch.setenv("QASHIFT_FROZEN", str(tmp_path / "frozen"))
    folder = packed_artifact(tmp_path / "frozen", b"\0" * 1024, {"lexical.npy": 1024})
    replace(folder / frozen.WEIGHTS / ("lexical.npy" + frozen.PACKED))
    with pytest.raises(UserError, match=why) as refused:
        frozen.weights_of(folder, Store(workspace))
    assert "weights/lexical.npy.xz cannot be unpacked" in str(refused.value)
    assert not (workspace / "models").exists()


@pytest.fixture
def untrained(tmp_path, dev_raw, monkeypatch, workspace):
    """The `words` registry, with nothing trained (a test of it stays in the fast tier)."""
    return approach_registry(tmp_path, dev_raw, monkeypatch, workspace, "words", WORDS)


def put_words(store: Store, job, word: str) -> str:
    """A `words` system of `job` stored in `store` with the weights `word` gives: its digest."""
    weights = store.workspace.parent / f"weights-{store.workspace.name}"
    weights.mkdir()
    (weights / "weights.txt").write_text(word)
    (weights / "vocabulary.txt").write_text("a\nb\n" * 600)
    digest = store.put_model(weights)
    store.put_system({
        "key": job.key, "system": job.system_id, "approach": job.approach.id,
        "approach_digest": job.approach.digest, "split": job.split.id,
        "split_sha256": job.split.sha256, "train_size": job.size, "seed": job.seed,
        "hyperparameters": canonical_json(job.hyperparameters).decode(),
        "weights_digest": digest, "runner": "local", "device": "cpu", "wall_s": 1.0,
        "log_sha256": None, "run_record": "{}", "created_at": time.time()})
    return digest


def test_an_imported_system_never_replaces_the_frozen_one_of_its_key(untrained, tmp_path,
                                                                      monkeypatch, capsys):
    """Another store's row of a frozen system's train key, with other weights, comes in with
    `store import`; the repository's frozen system is still the one that runs, and the
    store's row is ignored with a warning naming both digests."""
    monkeypatch.setenv("QASHIFT_FROZEN", str(tmp_path / "frozen"))
    job = train_job("words")
    honest = put_words(Store(tmp_path / "trained"), job, "0")
    folder, written = frozen.write(job, Store(tmp_path / "trained"), {})
    assert written
    other = put_words(Store(tmp_path / "other"), job, "3")
    here = Store(untrained["workspace"])
    assert import_store(here, tmp_path / "other").systems == 1
    assert here.get_system(job.key)["weights_digest"] == other
    capsys.readouterr()
    hit = stored(job, here)
    assert hit is not None and hit.row["weights_digest"] == honest
    assert hit.row["frozen"] == str(folder)
    assert hit.bundle.weights_digest == honest
    assert Path(hit.bundle.model["path"]) == folder / frozen.WEIGHTS
    [warning] = [line for line in capsys.readouterr().err.splitlines()
                 if line.startswith("warning:")]
    assert other in warning and honest in warning and job.system_id in warning
    [listed] = [r for r in trained_rows(here) if r["key"] == job.key]  # `qashift systems`
    assert listed["weights_digest"] == honest and listed["frozen"] == str(folder)
