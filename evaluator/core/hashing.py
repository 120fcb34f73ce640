"""Content identity: canonical JSON and the sha256 of files and folders.

Every key, digest and cache name in the project is made here, so two places never disagree on
what "the same content" means.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterable
from functools import cache
from pathlib import Path

CHUNK = 1 << 20
WEIGHTS_IGNORED = ("training.json",)  # training notes beside a checkpoint, not weights


def canonical_json(obj: object) -> bytes:
    """Canonical JSON bytes (sorted keys, no spaces, UTF-8): the same content hashes the same."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_of(path: Path) -> str:
    """sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


_SEEN: dict[tuple, str] = {}
SETTLED_NS = 2_000_000_000  # file times tick coarsely: a file changed this recently may
# change again under the same (size, mtime, ctime), so it is not remembered yet


def stat_key(path: Path) -> tuple | None:
    """What identifies a file's content without reading it, as long as it stays the same
    file: path, device, inode, size, modification and change times (the change time cannot
    be set back by hand). None for a file changed in the last two seconds."""
    info = os.stat(path)
    if time.time_ns() - max(info.st_mtime_ns, info.st_ctime_ns) < SETTLED_NS:
        return None
    return (os.fspath(path), info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns,
            info.st_ctime_ns)


def file_sha256(path: Path) -> str:
    """sha256 of a file, hashed once per process while its `stat_key` stays the same: a study
    reads each test set for every cell and table row, and re-hashing tens of megabytes each
    time cost most of a resumed run's time."""
    key = stat_key(path)
    if key is None:
        return sha256_of(path)
    if (digest := _SEEN.get(key)) is None:
        digest = _SEEN[key] = sha256_of(path)
    return digest


def tree_files(folder: Path) -> list[Path]:
    """Every file under `folder`, in path order, leaving out Python's byte-code caches."""
    return sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def files_digest(folder: Path, files: Iterable[Path], *, with_mode: bool = False) -> str:
    """sha256 over (path relative to `folder`, [executable bits,] content sha256) of `files`.

    With `with_mode` the executable bits count too (a build context: `RUN ./x.sh` depends on
    them); without, only names and bytes do.
    """
    return _files_digest(folder, tuple((p, *_stamp(p)) for p in files), with_mode)


@cache
def _files_digest(folder: Path, files: tuple[tuple[Path, int, int, int], ...],
                  with_mode: bool) -> str:
    # cached on (path, mtime, size, mode): a folder hashed once is not read again unchanged
    digest = hashlib.sha256()
    for path, _, _, mode in files:
        rel = path.relative_to(folder).as_posix()
        if with_mode:
            digest.update(f"{rel}\0{mode & 0o111:o}\0".encode())
        else:
            digest.update(rel.encode() + b"\0")
        digest.update(bytes.fromhex(sha256_of(path)))
    return digest.hexdigest()


def _stamp(path: Path) -> tuple[int, int, int]:
    stat = path.stat()
    return stat.st_mtime_ns, stat.st_size, stat.st_mode


def folder_digest(folder: Path, *, with_mode: bool = False) -> str:
    """The digest of everything under `folder` (a bundle, a build context)."""
    return files_digest(folder, tree_files(folder), with_mode=with_mode)


def weights_sha256(folder: Path) -> str:
    """The digest of a checkpoint: the files directly in `folder` that determine its answers."""
    files = [p for p in sorted(folder.iterdir()) if p.is_file()
             and p.name not in WEIGHTS_IGNORED and p.suffix != ".lock"]
    return files_digest(folder, files)
