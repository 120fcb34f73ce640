"""A frozen system as an attacker may shape what surrounds it: a manifest edited along with its
weights (a packed file that declares a huge size, an xz bomb, a pickle among the weights, a
system row that claims another id, device or train time), or another store, imported, holding
other weights under the frozen system's train key. The repository's frozen system, verified,
is what runs, what `qashift systems` lists is what the manifest's own fields give, and
unpacking it never takes more memory or disk than its declared, capped sizes."""

from __future__ import annotations

import hashlib
import json
import lzma
import os
import re
import time
import tracemalloc
from pathlib import Path

import pytest
from click.testing import CliRunner

from evaluator.cli.main import main
from evaluator.core.errors import UserError
from evaluator.core.gate import CHUNK, walk
from evaluator.core.hashing import canonical_json
from evaluator.jobs.job import format_system_id, train_key
from evaluator.store.store import Store
from evaluator.store.transfer import import_store
from evaluator.training import frozen
from evaluator.training.run import stored
from evaluator.training.systems import trained_rows
from tests.support.approaches import WORDS, approach_registry, train_job


def system_row(weights_digest: str, **fields) -> dict:
    """The system row of an honest training of `approach@split/s0`, `fields` changed; its
    key and id are what its fields give unless `fields` names them."""
    row = {"approach": "approach", "approach_digest": "a" * 64, "split": "split",
           "split_sha256": "b" * 64, "train_size": None, "seed": 0, "hyperparameters": "{}",
           "weights_digest": weights_digest, "runner": "local", "device": "cpu",
           "wall_s": 12.5, "log_sha256": None, "created_at": time.time()}
    record = {"runner": "local", "device": "cpu", "wall_s": 12.5, "exit_code": 0,
              "details": {"provenance": {"started_at": row["created_at"] - 20,
                                         "finished_at": row["created_at"] - 1}}}
    row = {**row, "run_record": json.dumps(record), **fields}
    return {"key": train_key(row["approach_digest"], row["split_sha256"], row["train_size"],
                             json.loads(row["hyperparameters"]), row["seed"]),
            "system": format_system_id(row["approach"], row["split"], row["train_size"],
                                       row["seed"], None), **row}


def packed_artifact(base: Path, content: bytes, declared: dict[str, int],
                    packed: bytes | None = None, sha: str | None = None) -> Path:
    """A frozen folder under `base` whose files `declared` names are all stored packed (each
    `packed`, by default the xz of `content`), each declaring the size given; its manifest
    names the digest and sha256 (`sha`, by default of `content`) of the honest unpacked
    files, and an honest system row."""
    folder = base / "approach" / "split" / "s0"
    (folder / frozen.WEIGHTS).mkdir(parents=True)
    small = lzma.compress(content, preset=0) if packed is None else packed
    sha = sha or hashlib.sha256(content).hexdigest()
    digest = hashlib.sha256()  # the gate's digest of the unpacked files, by its definition
    for rel in sorted(declared):
        (folder / frozen.WEIGHTS / (rel + frozen.PACKED)).write_bytes(small)
        digest.update(rel.encode() + b"\0" + bytes.fromhex(sha))
    entry = {"bytes": len(small), "sha256": hashlib.sha256(small).hexdigest()}
    manifest = {"format": frozen.FORMAT, "system": system_row(digest.hexdigest()),
                "files": {rel: sha for rel in declared}, "bytes": sum(declared.values()),
                "packed": {rel: {**entry, "size": size} for rel, size in declared.items()},
                "scores": {}}
    (folder / frozen.MANIFEST).write_text(json.dumps(manifest))
    return folder


@pytest.mark.parametrize("declared, packed, why", [
    ({"lexical.npy": 100 * 1024 + 1}, 1024,
     r"weights/lexical\.npy\.xz declares 102,401 bytes unpacked from 1,024, more than 100 "
     r"times its size; refused"),
    ({f"part{i}.npy": 300 << 20 for i in range(4)}, 5 << 20,
     r"its packed files declare 1,258,291,200 bytes unpacked, over the 1,073,741,824 allowed "
     r"in all; refused"),
], ids=["ratio", "all-files"])
def test_a_packed_file_declared_larger_than_its_caps_allow_is_refused_naming_it(
        tmp_path, workspace, monkeypatch, declared, packed, why):
    """The declared size bounds what unpacking writes: one over the ratio to its packed bytes,
    or packed files over the absolute cap together, are refused as the manifest is read,
    before a byte is unpacked (the stored files need not even be xz)."""
    monkeypatch.setenv("QASHIFT_FROZEN", str(tmp_path / "frozen"))
    folder = packed_artifact(tmp_path / "frozen", b"", declared, os.urandom(packed))
    listed = CliRunner().invoke(main, ["systems"])  # one line names it, the rest go on
    assert listed.exit_code == 0, listed.output
    [line] = [x for x in listed.stderr.splitlines() if str(folder) in x]
    assert line.startswith(f"warning: frozen system {folder}: ") and re.search(why, line)
    assert frozen.manifests() == []
    store = Store(workspace)
    with pytest.raises(UserError, match=why):
        frozen.weights_of(folder, store)
    assert not (workspace / "models").exists()


def test_a_manifest_whose_files_do_not_hash_to_its_weights_digest_is_refused_as_read(
        tmp_path, workspace, monkeypatch):
    """A packed file's unpacked sha256 edited in the manifest (its xz and the xz's sha256
    honest, the weights digest as it was): refused as the manifest is read, so that no view,
    which never unpacks, names the system by a digest its files do not have; nothing is
    unpacked."""
    monkeypatch.setenv("QASHIFT_FROZEN", str(tmp_path / "frozen"))
    folder = packed_artifact(tmp_path / "frozen", b"weights", {"lexical.npy": 7})
    assert [m["folder"] for m in frozen.manifests()] == [str(folder)]  # honest: listed
    manifest = json.loads((folder / frozen.MANIFEST).read_text())
    manifest["files"]["lexical.npy"] = hashlib.sha256(b"other weights").hexdigest()
    (folder / frozen.MANIFEST).write_text(json.dumps(manifest))
    why = "the files its manifest lists do not hash to the weights digest it names; refused"
    listed = CliRunner().invoke(main, ["systems"])
    assert listed.exit_code == 0, listed.output
    [line] = [x for x in listed.stderr.splitlines() if str(folder) in x]
    assert line == f"warning: frozen system {folder}: {why}; left out"
    assert frozen.manifests() == []
    with pytest.raises(UserError, match=why):
        frozen.weights_of(folder, Store(workspace))
    assert not (workspace / "models").exists()


@pytest.fixture(scope="module")
def xz_bomb() -> tuple[bytes, str]:
    """An xz member of some 150 KB that unpacks to 1 GiB of zeros, and the sha256 of those."""
    packer, zeros = lzma.LZMACompressor(format=lzma.FORMAT_XZ, preset=0), bytes(CHUNK * 16)
    unpacked, pieces = hashlib.sha256(), []
    for _ in range((1 << 30) // len(zeros)):
        pieces.append(packer.compress(zeros))
        unpacked.update(zeros)
    return b"".join([*pieces, packer.flush()]), unpacked.hexdigest()


def test_an_xz_bomb_is_refused_before_a_byte_is_unpacked(tmp_path, workspace, monkeypatch,
                                                         xz_bomb):
    """A manifest that declares the bomb honestly (its size, its sha256: every check of the
    bytes would pass) is refused as it is read, by the ratio of its declared to its packed
    bytes: nothing is unpacked, nothing written to the store or a partial file."""
    bomb, sha = xz_bomb
    assert len(bomb) < 200_000
    monkeypatch.setenv("QASHIFT_FROZEN", str(tmp_path / "frozen"))
    folder = packed_artifact(tmp_path / "frozen", b"", {"lexical.npy": 1 << 30}, bomb, sha)
    why = (rf"weights/lexical\.npy\.xz declares 1,073,741,824 bytes unpacked from "
           rf"{len(bomb):,}, more than 100 times its size; refused")
    listed = CliRunner().invoke(main, ["systems"])  # listed as refused, the rest go on
    assert listed.exit_code == 0 and "more than 100 times its size" in listed.stderr
    assert frozen.manifests() == []
    started = time.monotonic()
    with pytest.raises(UserError, match=why):
        frozen.weights_of(folder, Store(workspace))
    assert time.monotonic() - started < 5
    assert not (workspace / "models").exists()
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and p.stat().st_size > 1 << 20]


def test_a_packed_file_is_unpacked_in_a_stream_never_whole_in_memory(tmp_path, workspace,
                                                                     monkeypatch):
    """A packed file may declare up to the cap of all packed files (1 GiB): unpacking it
    whole in memory would let a file of a few MiB take that much. It goes to disk piece by
    piece."""
    size = 32 << 20
    content = bytearray(size)
    content[::16] = os.urandom(size // 16)  # packs some 15 to one, within the ratio
    monkeypatch.setenv("QASHIFT_FROZEN", str(tmp_path / "frozen"))
    folder = packed_artifact(tmp_path / "frozen", bytes(content), {"lexical.npy": size})
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
        "log_sha256": None, "created_at": time.time(),
        "run_record": json.dumps({"runner": "local", "device": "cpu", "wall_s": 1.0})})
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


def frozen_words(untrained, tmp_path: Path, monkeypatch) -> tuple[Path, dict]:
    """The `words` system of seed 0 frozen into tmp_path/frozen: its folder and manifest."""
    monkeypatch.setenv("QASHIFT_FROZEN", str(tmp_path / "frozen"))
    job = train_job("words")
    put_words(Store(tmp_path / "trained"), job, "0")
    folder, written = frozen.write(job, Store(tmp_path / "trained"), {})
    assert written and [m["system"]["system"] for m in frozen.manifests()] == [job.system_id]
    return folder, json.loads((folder / frozen.MANIFEST).read_text())


def rekeyed(system: dict, **fields) -> dict:
    """`system` with `fields` changed and its key and id made to agree with them."""
    row = {**system, **fields}
    return {**row, "key": train_key(row["approach_digest"], row["split_sha256"],
                                    row["train_size"], json.loads(row["hyperparameters"]),
                                    row["seed"]),
            "system": format_system_id(row["approach"], row["split"], row["train_size"],
                                       row["seed"], None)}


@pytest.mark.parametrize("claim, why", [
    (lambda s: {**s, "system": "words@tiny-train/s7"},
     r"its system id 'words@tiny-train/s7' is not words@tiny-train/s0\[/hHASH\] as its "
     r"fields say"),
    (lambda s: {**s, "device": "cuda", "wall_s": 0.5},
     r"its device 'cuda' is not the 'cpu' its run record states"),
    (lambda s: {**s, "wall_s": 3600.0}, r"its wall_s '3600.0' is not the '1.0' its run record"),
    (lambda s: {**s, "wall_s": 3600.0, "run_record": json.dumps({
        "runner": "local", "device": "cpu", "wall_s": 3600.0, "details": {"provenance": {
            "started_at": s["created_at"] - 20, "finished_at": s["created_at"] - 1}}})},
     r"its train time 3600 s is longer than the 19 s its run record's provenance spans"),
    (lambda s: {**s, "run_record": json.dumps({
        "runner": "local", "device": "cpu", "wall_s": 1.0, "details": {"provenance": {
            "started_at": 10 ** 400, "finished_at": s["created_at"] - 1}}})},
     r"its run record's start and end are not times before the row was made"),
    (lambda s: {**s, "seed": 7}, r"its key is not the train key"),
    (lambda s: rekeyed(s, seed=7),
     r"its manifest names words@tiny-train/s7, whose folder is words/tiny-train/s7"),
], ids=["system-id", "device", "train-time", "time-past-provenance", "time-of-400-digits",
        "seed", "moved"])
def test_a_manifest_that_claims_another_system_is_refused_and_never_listed_as_it(
        untrained, tmp_path, monkeypatch, claim, why):
    """A manifest's system row edited to claim another id, device, train time or seed than its
    fields and run record give is refused in one line as it is read (the rule `store import`
    holds a row to): `qashift systems` does not list it as what it claims, nor runs it."""
    folder, manifest = frozen_words(untrained, tmp_path, monkeypatch)
    claimed = claim(manifest["system"])
    (folder / frozen.MANIFEST).chmod(0o644)
    (folder / frozen.MANIFEST).write_text(json.dumps({**manifest, "system": claimed}))
    listed = CliRunner().invoke(main, ["systems"])
    assert listed.exit_code == 0, listed.output
    [line] = [x for x in listed.stderr.splitlines() if "words" in x]  # named once, not listed
    assert line.startswith("warning: ") and re.search(why, line), line
    assert "words@" not in listed.stdout
    assert frozen.manifests() == []  # left out, never read as what it claims
    with pytest.raises(UserError, match=why) as refused:
        frozen.find(train_job("words"))
    assert str(refused.value).startswith(f"frozen system {folder}: ")
    assert "\n" not in str(refused.value)
    with pytest.raises(UserError, match=why):
        stored(train_job("words"), Store(untrained["workspace"]))


@pytest.mark.parametrize("name", ["model.pkl", "reader.pt", "lexical.npy.pkl"])
def test_a_pickle_among_the_weights_is_refused_though_its_manifest_names_it(
        untrained, tmp_path, monkeypatch, name):
    """A file that runs code as it loads, named in the manifest with its sha256 and counted
    in the weights digest (every check of the bytes passes), is refused by `verify`: only
    the suffixes that load without running code pass."""
    folder, manifest = frozen_words(untrained, tmp_path, monkeypatch)
    weights = folder / frozen.WEIGHTS
    weights.chmod(0o755)
    (weights / name).write_bytes(b"\x80\x04cos\nsystem\n(S'touch /tmp/owned'\ntR.")
    manifest["files"][name] = hashlib.sha256((weights / name).read_bytes()).hexdigest()
    manifest["system"] = {**manifest["system"], "weights_digest": walk(weights).digest}
    (folder / frozen.MANIFEST).chmod(0o644)
    (folder / frozen.MANIFEST).write_text(json.dumps(manifest))
    [read] = frozen.manifests()
    why = (rf"frozen system {re.escape(str(folder))}: weights/{re.escape(name)} is not a format "
           rf"that loads without running code \(\.safetensors, \.json, \.npy, \.txt\); refused")
    with pytest.raises(UserError, match=why):
        frozen.verify(read)
    with pytest.raises(UserError, match=why):
        stored(train_job("words"), Store(untrained["workspace"]))
