"""Content identity: canonical JSON and the sha256 of bytes and files (folders: `core.gate`).

Every key, digest and cache name in the project is made here, so two places never disagree on
what "the same content" means.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

CHUNK = 1 << 20


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
