"""Frozen systems kept in the repository: a trained system as a durable artifact.

`frozen/<approach>/<split>[~size]/s<seed>[-h<hash>]/` holds `weights/` (exactly the files the
system's predict command reads: safetensors, JSON, npy without pickle; nothing that runs code
when loaded) and `manifest.json`: the system id, its train key, approach digest,
hyperparameters, split sha256, seed, train size, where and how long it trained, the sha256
of every weights file with their digest, and its headline scores. A clean clone can run
every frozen system without training it, which is the premise of evaluating frozen models
on new test sets.

A frozen system is written once from the store (`write`), through the gate; an artifact is
never replaced silently. Reading its manifest checks it as `store import` checks a system row
(`transfer.system_claims_problem`: its key, system id, runner, device and train time are what
its fields and run record give) and that it sits in the folder its system id names, so it is
never listed as a system it is not. Using one walks its weights through the gate again and
refuses, in one line naming the file, any file whose bytes are not the manifest's, and any
whose suffix is not one that loads without running code (`SAFE_SUFFIXES`: no pickle).

A file that xz shrinks to three quarters or less (a sparse array, a vocabulary; dense float
weights do not shrink) is kept packed, as `NAME.xz`, its sha256 under `packed` in the
manifest. `files` and the weights digest stay those of the files the approach wrote: a
system with packed files runs from an unpacked copy in the store's `models/<digest>/`, made
once and checked byte for byte against the manifest, so packing changes no score. A packed
file may declare at most UNPACK_RATIO times its packed bytes unpacked, and an artifact's
packed files at most UNPACK_CAP in all (a manifest declaring more is refused before a byte is
unpacked: an xz bomb is refused by its declaration); it is unpacked in a stream to a partial
file on disk, hashed as it goes, refused as soon as it passes its declared size, and moved
into place only whole and right.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import lzma
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from evaluator.core import console, settings
from evaluator.core.errors import UserError
from evaluator.core.files import atomic_file, remove_tree, run_tempdir, write_atomic
from evaluator.core.gate import (
    CHUNK,
    Limits,
    Refused,
    files_digest,
    is_digest,
    open_bounded,
    read_json,
    walk,
)
from evaluator.core.hashing import sha256_bytes
from evaluator.jobs.job import parse_system_id
from evaluator.store.schema import SYSTEM_FIELDS
from evaluator.store.store import Store
from evaluator.store.transfer import system_claims_problem
from evaluator.training.job import TrainJob

MANIFEST = "manifest.json"
WEIGHTS = "weights"
FORMAT = 1
SAFE_SUFFIXES = (".safetensors", ".json", ".npy", ".txt")  # loading them runs no code
MANIFEST_CAP = 4 << 20
PACKED = ".xz"  # the suffix of a packed file: NAME.xz unpacks to NAME
PACK_MIN_BYTES = 256 << 10  # smaller files are left as they are
PACK_RATIO = 0.75  # packed when xz makes a file at most this share of its size
FILE_CAP = Limits.file_bytes  # a stored file that is not packed: the gate's bytes per file
UNPACK_RATIO = 100  # a packed file declares at most this many times its bytes (the 124 of
# the repository: at most 8.1; the tests' vocabulary 58; zeros pack some 7,000 to one)
UNPACK_CAP = 1 << 30  # all of an artifact's packed files, unpacked (the largest: 0.7 MB)
UNPACK_MEMORY = 256 << 20  # xz's own presets need at most 65 MiB to unpack


def root() -> Path:
    """The folder of frozen systems: `QASHIFT_FROZEN`, or `frozen/` in the checkout
    (`QASHIFT_ROOT`, else this source tree)."""
    return Path(os.environ.get("QASHIFT_FROZEN") or settings.project_root() / "frozen")


def folder_of(job: TrainJob) -> Path:
    """Where the artifact of a train cell lives (its system id, spelled as folders)."""
    return _folder_named(parse_system_id(job.system_id))


def _folder_named(parts: dict) -> Path:
    """The folder a parsed system id names under `root()`."""
    size = f"~{parts['size']}" if parts["size"] else ""
    return root() / parts["approach"] / f"{parts['split']}{size}" / (
        f"s{parts['seed']}" + (f"-h{parts['hp']}" if parts["hp"] else ""))


def row_named(system_id: str) -> dict | None:
    """The frozen system row of a system id, read from the one folder the id names (not
    verified); None where the repository has no artifact there. A refused manifest is its
    one-line error."""
    parts = parse_system_id(system_id)
    path = _folder_named(parts) / MANIFEST if parts else None
    if path is None or not path.is_file():
        return None
    return row_of(_manifest(path))


_WARNED: set[str] = set()  # refused manifests already named in this process


def manifests() -> list[dict]:
    """Every frozen system's manifest (read, not yet verified), in path order. A manifest
    that is refused (unreadable, or claiming what its fields and run record do not give) is
    left out with a one-line warning naming it: one bad artifact never hides the others, and
    running its system is that line as an error (`find`)."""
    base = root()
    if not base.is_dir():
        return []
    out = []
    for path in sorted(base.glob(f"*/*/*/{MANIFEST}")):
        try:
            out.append(_manifest(path))
        except Exception as exc:  # noqa: BLE001 - whatever a bad manifest raises, the rest list
            if str(path) not in _WARNED:
                _WARNED.add(str(path))
                why = str(exc) if isinstance(exc, UserError) else \
                    f"frozen system manifest {path}: {type(exc).__name__}: {exc}"[:300]
                console.warn(f"{why}; left out")
    return out


def _manifest(path: Path) -> dict:
    try:
        doc = read_json(path, MANIFEST_CAP)
    except Refused as exc:
        raise UserError(f"frozen system manifest {path}: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or \
            not isinstance(doc.get("system"), dict) or not _packed_entries(doc.get("packed", {})) \
            or not isinstance(doc.get("files"), dict):
        raise UserError(f"{path} is not a frozen-system manifest of format {FORMAT}")
    _refuse_claims(path.parent, doc["system"])
    _refuse_other_digest(path.parent, doc)
    _refuse_oversized(path.parent, doc.get("packed") or {})
    return {**doc, "folder": str(path.parent)}


def _refuse_other_digest(folder: Path, doc: dict) -> None:
    """Refuse a manifest whose table of files (the approach's files, packed ones as they
    unpack) does not hash to the weights digest its system row names: the digest that names
    the system's bundle and results is the files' own, packed or not, before a byte is
    read (a view of a packed system never unpacks it)."""
    files = doc["files"]
    if not all(isinstance(rel, str) and is_digest(sha) for rel, sha in files.items()):
        raise UserError(f"frozen system {folder}: its manifest's files are not paths with "
                        f"their sha256; refused")
    if files_digest(files) != doc["system"].get("weights_digest"):
        raise UserError(f"frozen system {folder}: the files its manifest lists do not hash to "
                        f"the weights digest it names; refused")


def _refuse_claims(folder: Path, system: dict) -> None:
    """Refuse a manifest whose system row says another training, id, device or train time
    than its own fields and run record give (the rule `store import` holds a row to), or
    that sits in a folder other than the one its system id names: a one-line error."""
    if why := system_claims_problem(system):
        raise UserError(f"frozen system {folder}: its manifest's system row is refused: "
                        f"{why}")
    parts = parse_system_id(system["system"])
    if parts is None:
        raise UserError(f"frozen system {folder}: its manifest names no system id; refused")
    size = f"~{parts['size']}" if parts["size"] else ""
    named = (parts["approach"], f"{parts['split']}{size}",
             f"s{parts['seed']}" + (f"-h{parts['hp']}" if parts["hp"] else ""))
    if folder.parts[-3:] != named:
        raise UserError(f"frozen system {folder}: its manifest names {system['system']}, "
                        f"whose folder is {'/'.join(named)}; refused")


def _refuse_oversized(folder: Path, packed: dict[str, dict]) -> None:
    """Refuse a manifest whose packed files declare more bytes unpacked than UNPACK_RATIO
    times their packed bytes, or more than UNPACK_CAP in all: the declared size bounds what
    unpacking writes, so an xz bomb (150 KB of xz that unpack to 1 GiB of zeros) is refused
    here, before a byte is unpacked; a one-line error naming the first such file."""
    for rel, entry in sorted(packed.items()):
        if entry["size"] > UNPACK_RATIO * entry["bytes"]:
            raise UserError(f"frozen system {folder}: {WEIGHTS}/{rel}{PACKED} declares "
                            f"{entry['size']:,} bytes unpacked from {entry['bytes']:,}, more "
                            f"than {UNPACK_RATIO} times its size; refused")
    total = sum(entry["size"] for entry in packed.values())
    if total > UNPACK_CAP:
        raise UserError(f"frozen system {folder}: its packed files declare {total:,} bytes "
                        f"unpacked, over the {UNPACK_CAP:,} allowed in all; refused")


def _packed_entries(packed: object) -> bool:
    """Whether a manifest's `packed` is {NAME: {sha256, bytes, size}} (empty where none)."""
    return isinstance(packed, dict) and all(
        isinstance(e, dict) and is_digest(e.get("sha256")) and
        all(isinstance(e.get(k), int) and e[k] >= 0 for k in ("bytes", "size"))
        for e in packed.values())


def row_of(manifest: dict) -> dict:
    """The manifest as a store `systems` row, with `frozen` naming the artifact's folder."""
    return {**{f: manifest["system"].get(f) for f in SYSTEM_FIELDS}, "frozen": manifest["folder"]}


def find(job: TrainJob) -> dict | None:
    """The frozen system of this train cell, verified; None where the repository has none
    (or one of an earlier version of the approach: another train key)."""
    manifest = _manifest_of(job)
    if manifest is None:
        return None
    verify(manifest)
    return row_of(manifest)


def _manifest_of(job: TrainJob) -> dict | None:
    """The manifest of the repository's artifact of this train cell (same train key), read but
    not verified; None where there is none."""
    path = folder_of(job) / MANIFEST
    if not path.is_file():
        return None
    manifest = _manifest(path)
    return manifest if manifest["system"].get("key") == job.key else None


def verify(manifest: dict) -> None:
    """Walk the artifact's weights through the gate: every file the manifest names (packed
    ones as `NAME.xz`), with its sha256, and nothing else, each of a format that loads
    without running code; a one-line refusal naming the first that differs."""
    folder = Path(manifest["folder"])
    weights = folder / WEIGHTS
    packed = manifest.get("packed") or {}
    if unsafe := _unsafe([*manifest["files"], *packed]):
        stored = unsafe + (PACKED if unsafe in packed else "")
        raise UserError(f"frozen system {folder}: {WEIGHTS}/{stored} is not a format that "
                        f"loads without running code ({', '.join(SAFE_SUFFIXES)}); refused")
    try:
        walked = walk(weights, label=f"frozen system {folder}")
    except Refused as exc:
        raise UserError(str(exc)) from None
    found = {rel: sha for rel, sha, _ in walked.files}
    wanted = _stored_files(manifest)
    for rel in sorted(set(found) | set(wanted)):
        if found.get(rel) != wanted.get(rel):
            why = ("is not in its manifest" if rel not in wanted else "is missing"
                   if rel not in found else "does not match its sha256 in the manifest")
            raise UserError(f"frozen system {folder}: {WEIGHTS}/{rel} {why}; refused "
                            f"(restore it with git checkout, or freeze the system again)")
    # the files are the manifest's, whose table hashes to the weights digest (`_manifest`)


def _unsafe(names: list[str]) -> str | None:
    """The first of `names` (files as the approach wrote them) whose suffix is not one that
    loads without running code: a pickle (`.pkl`, `.pt`, `.bin`) runs code as it loads."""
    return next((name for name in sorted(names) if not name.endswith(SAFE_SUFFIXES)), None)


def _stored_files(manifest: dict) -> dict[str, str]:
    """The files an artifact's `weights/` holds, with their sha256: packed ones as NAME.xz."""
    packed = manifest.get("packed") or {}
    return {**{rel: sha for rel, sha in (manifest.get("files") or {}).items()
               if rel not in packed},
            **{rel + PACKED: entry["sha256"] for rel, entry in packed.items()}}


def weights_of(folder: Path, store: Store, *, unpack: bool = True) -> Path:
    """The weights of the (verified) artifact in `folder` as its approach wrote them: its own
    `weights/`, or where files are packed, their copy in the store's `models/<digest>/`,
    unpacked once (each file checked against its sha256 in the manifest, the folder against
    the weights digest, through the gate); without `unpack`, where that copy is or will be."""
    manifest = _manifest(folder / MANIFEST)
    if not manifest.get("packed"):
        return folder / WEIGHTS
    digest = manifest["system"]["weights_digest"]
    target = store.model_path(digest)
    if unpack and not target.is_dir():
        with run_tempdir("unpack") as tmp:  # found and removed if this process is killed
            _unpack(manifest, Path(tmp) / WEIGHTS)
            store.put_model(Path(tmp) / WEIGHTS, expected=digest,
                            label=f"frozen system {folder}")
    return target


def _unpack(manifest: dict, out: Path) -> None:
    """The files the approach wrote, from an artifact's stored ones, into the new folder `out`;
    a file whose bytes are not its sha256 in the manifest is refused, naming it."""
    folder = Path(manifest["folder"])
    packed = manifest.get("packed") or {}
    for rel, sha in sorted(manifest["files"].items()):
        entry = packed.get(rel)
        stored = rel + PACKED if entry else rel
        label = f"frozen system {folder}: {WEIGHTS}/{stored}"
        try:
            _unpack_file(folder / WEIGHTS / stored, out / rel, sha, entry)
        except _OtherBytes:
            raise UserError(f"{label} does not unpack to the sha256 in its manifest; "
                            f"refused") from None
        except (Refused, lzma.LZMAError, ValueError) as exc:
            raise UserError(f"{label} cannot be unpacked ({exc}); refused") from None
        except OSError as exc:
            raise UserError(f"{label} cannot be unpacked ({exc.strerror or exc}); "
                            f"refused") from None


class _OtherBytes(Exception):
    """A stored file unpacked to bytes other than its sha256 in the manifest."""


def _unpack_file(source: Path, target: Path, sha: str, entry: dict | None) -> None:
    """One stored file (xz-packed where `entry` says so) to `target`, in a stream: written to
    a partial file beside it and hashed piece by piece, so memory never holds the file; the
    partial file goes on any refusal and is moved into place only once its sha256 is right."""
    with open_bounded(source, entry["bytes"] if entry else FILE_CAP, "it") as read, \
            atomic_file(target) as (handle, _):
        digest = hashlib.sha256()
        for piece in _unpacked(read, entry["size"]) if entry else iter(read, b""):
            digest.update(piece)
            handle.write(piece)
        if digest.hexdigest() != sha:
            raise _OtherBytes


def _unpacked(read: Callable[[], bytes], size: int) -> Iterator[bytes]:
    """The bytes of the one xz stream `read` gives, in pieces of at most CHUNK: exactly `size`
    of them, refused as soon as there are more (or at its end, fewer, or bytes after it)."""
    unpacker = lzma.LZMADecompressor(format=lzma.FORMAT_XZ, memlimit=UNPACK_MEMORY)
    wrong = f"it does not unpack to its {size:,} bytes"
    done = 0
    while not unpacker.eof:
        data = read() if unpacker.needs_input else b""
        if unpacker.needs_input and not data:
            raise ValueError(wrong)  # the file ends before its stream does
        piece = unpacker.decompress(data, max_length=CHUNK)
        done += len(piece)
        if done > size:
            raise ValueError(wrong)
        yield piece
    if done != size or unpacker.unused_data or read():
        raise ValueError(wrong)


def _pack(weights: Path, files: dict[str, str], packed: dict[str, dict]) -> dict[str, dict]:
    """Write NAME.xz for each file of `files` not packed yet that xz shrinks to PACK_RATIO or
    less, and not below 1/UNPACK_RATIO, while the packed files stay within UNPACK_CAP (what
    a manifest may declare); `packed` with their entries added (sha256 and bytes of NAME.xz,
    size of NAME). NAME itself goes once a manifest names it packed (`_tidy`)."""
    packed = dict(packed)
    for rel in sorted(set(files) - set(packed)):
        path = weights / rel
        size = path.stat().st_size
        if size < PACK_MIN_BYTES or size + sum(e["size"] for e in packed.values()) > UNPACK_CAP:
            continue
        data = path.read_bytes()
        if sha256_bytes(data) != files[rel]:
            raise UserError(f"{path} does not match its sha256 in the manifest; not packed")
        small = lzma.compress(data, format=lzma.FORMAT_XZ, preset=9 | lzma.PRESET_EXTREME)
        if len(small) > PACK_RATIO * size or size > UNPACK_RATIO * len(small):
            continue
        with _writable(path.parent):
            write_atomic(path.with_name(path.name + PACKED), small)
        path.with_name(path.name + PACKED).chmod(0o444)
        packed[rel] = {"bytes": len(small), "sha256": sha256_bytes(small), "size": size}
    return packed


def _tidy(weights: Path, files: dict[str, str], packed: dict[str, dict]) -> None:
    """Remove what is not an artifact's stored form: NAME of a packed file, and NAME.xz of a
    file kept as it is (both left by a packing pass that was interrupted)."""
    extra = [rel for rel in packed] + [rel + PACKED for rel in files if rel not in packed]
    for rel in extra:
        path = weights / rel
        if path.is_file() and not path.is_symlink():
            with _writable(path.parent):
                path.unlink()


@contextlib.contextmanager
def _writable(folder: Path) -> Iterator[None]:
    """`folder` writable by its owner for a while (a frozen copy is sealed read-only)."""
    mode = stat.S_IMODE(folder.stat().st_mode)
    folder.chmod(mode | stat.S_IWUSR)
    try:
        yield
    finally:
        folder.chmod(mode)


def write(job: TrainJob, store: Store, scores: dict[str, dict]) -> tuple[Path, bool]:
    """Freeze the stored system of `job` into the repository (through the gate); (folder,
    written). An artifact already there with the same train key and weights is kept (its
    headline scores brought up to date); one with other weights is never replaced silently."""
    row = store.get_system(job.key)
    if row is None:
        raise UserError(f"{job.system_id} is not trained in this store")
    folder = folder_of(job)
    if (folder / MANIFEST).is_file():
        manifest = _manifest(folder / MANIFEST)
        have = manifest["system"]
        if have.get("key") == row["key"] and have.get("weights_digest") == row["weights_digest"]:
            update(job, scores)
            return folder, False
        raise UserError(f"{folder} holds another training of {job.system_id}; remove it "
                        f"first to replace it (an artifact is never replaced silently)")
    source = store.model_path(row["weights_digest"])
    partial = folder.with_name(f".partial-{folder.name}")
    remove_tree(partial)
    try:
        walked = walk(source, target=partial / WEIGHTS, label=job.system_id)
        if walked.digest != row["weights_digest"]:
            raise UserError(f"{job.system_id}: the store's weights do not hash to their digest")
        if unsafe := _unsafe([rel for rel, _, _ in walked.files]):
            raise UserError(f"{job.system_id}: {unsafe} is not a format that loads "
                            f"without running code ({', '.join(SAFE_SUFFIXES)})")
        files = {rel: sha for rel, sha, _ in walked.files}
        packed = _pack(partial / WEIGHTS, files, {})
        _tidy(partial / WEIGHTS, files, packed)
        manifest = {
            "format": FORMAT, "system": {f: row[f] for f in SYSTEM_FIELDS},
            "files": files, "bytes": walked.total_bytes,
            **_packing(walked.total_bytes, packed),
            "scores": {k: scores[k] for k in sorted(scores)},
        }
        partial.chmod(0o755)
        _write_manifest(partial, manifest)
        folder.parent.mkdir(parents=True, exist_ok=True)
        partial.rename(folder)
    finally:
        remove_tree(partial)
    return folder, True


def update(job: TrainJob, scores: dict[str, dict]) -> bool:
    """Whether the repository holds the frozen system of `job` (this train key); it is then
    brought up to date: its manifest's headline scores to `scores` (more sets scored since it
    was frozen, here or on another machine), and its files that pack well packed. A set
    `scores` lacks keeps its score: a system two studies share (the population's and the
    extra-data study's base-split systems) states the sets of both, whichever is frozen
    last."""
    manifest = _manifest_of(job)
    if manifest is None:
        return False
    folder, files = Path(manifest["folder"]), manifest["files"]
    weights = folder / WEIGHTS
    _tidy(weights, files, manifest.get("packed") or {})
    verify(manifest)
    del manifest["folder"]
    packed = _pack(weights, files, manifest.get("packed") or {})
    merged = {**manifest.get("scores", {}), **scores}
    if manifest.get("scores") != merged or (manifest.get("packed") or {}) != packed:
        _write_manifest(folder, {**manifest, **_packing(manifest["bytes"], packed),
                                 "scores": dict(sorted(merged.items()))})
    _tidy(weights, files, packed)
    return True


def _packing(total: int, packed: dict[str, dict]) -> dict:
    """A manifest's record of its packed files (none where nothing is packed): each entry, and
    the bytes `weights/` holds, packed files at their packed size."""
    if not packed:
        return {}
    return {"packed": packed,
            "stored_bytes": total - sum(e["size"] - e["bytes"] for e in packed.values())}


def _write_manifest(folder: Path, manifest: dict) -> None:
    write_atomic(folder / MANIFEST, (json.dumps(manifest, indent=1, sort_keys=True)
                                     + "\n").encode())
