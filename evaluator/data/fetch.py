"""Obtain a public data file by content hash: cache, then local mirrors, then its URL.

The sha256 in a folder's yaml is the file's identity. Nothing is used before its hash is
checked, and a file that fails the check is never put in the cache. A download is retried
with back-off after a transient failure and resumes where it stopped (an HTTP Range request
from the bytes of `<cache>/<sha256>.part`), also after the process was killed; progress is
reported in plain lines.
"""

from __future__ import annotations

import os
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from evaluator.core import console, settings
from evaluator.core.errors import DataError
from evaluator.core.files import atomic_file
from evaluator.core.hashing import CHUNK, file_sha256, sha256_of


@dataclass(frozen=True)
class Source:
    """A remote file: its path inside a mirror, its sha256 and where it is published."""

    file: str
    sha256: str
    url: str | None = None
    size: int | None = None


ATTEMPTS = 4
BACKOFF_S = 2.0  # waits 2, 4, 8 s between attempts
PERMANENT = (400, 401, 403, 404, 410)  # HTTP errors that another attempt will not mend


def cached_path(sha256: str) -> Path:
    return settings.cache_dir() / "files" / sha256[:2] / sha256


def fetch(source: Source, what: str, mirrors: list[Path] | None = None,
          cap: int | None = None) -> Path:
    """Return a verified local path for `source`; `what` names it in error messages. A
    download stops at the source's `size`, else at `cap` bytes, where either is known."""
    target = cached_path(source.sha256)
    if target.exists():
        if file_sha256(target) == source.sha256:
            return target
        target.unlink()  # a corrupted cache entry is recomputed, never trusted
    tried: list[str] = []
    for mirror in mirrors if mirrors is not None else settings.mirror_dirs():
        candidate = mirror / source.file
        if candidate.is_file():
            _verify(candidate, source, what, origin=str(candidate))
            return _install(candidate, target)
        tried.append(str(candidate))
    if source.url:
        return _download(source, target, what, tried, source.size or cap)
    hint = f"tried {', '.join(tried)}; " if tried else ""
    raise DataError(f"{what}: no local copy and no URL ({hint}"
                    f"put {source.file} in a mirror directory given by --data-dir)")


def _verify(path: Path, source: Source, what: str, origin: str) -> None:
    actual = sha256_of(path)
    if actual != source.sha256:
        raise DataError(f"{what}: sha256 mismatch for {origin}: expected {source.sha256}, "
                        f"got {actual}; the file is corrupt or a different version: "
                        f"replace it with the published file")


def _install(path: Path, target: Path) -> Path:
    with atomic_file(target) as (out, _), open(path, "rb") as src:
        shutil.copyfileobj(src, out, CHUNK)
    return target


def _download(source: Source, target: Path, what: str, tried: list[str],
              limit: int | None) -> Path:
    import urllib.error  # lazy: http, ssl, email cost every start ~25 ms; a download needs them

    if urlsplit(source.url).scheme not in ("http", "https"):  # urllib also reads file:, ftp:
        raise DataError(f"{what}: {source.url!r} is not an http:// or https:// address")

    partial = target.with_name(target.name + ".part")
    partial.parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(1, ATTEMPTS + 1):
        try:
            _fetch_into(partial, source, what, limit)
            break
        except urllib.error.HTTPError as exc:
            if exc.code in PERMANENT or attempt == ATTEMPTS:
                raise _unreachable(source, what, tried, exc) from None
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            offline = isinstance(getattr(exc, "reason", None), socket.gaierror)
            if offline or attempt == ATTEMPTS:  # no name resolution: no retry will help
                raise _unreachable(source, what, tried, exc) from None
        wait = BACKOFF_S * 2 ** (attempt - 1)
        have = partial.stat().st_size if partial.exists() else 0
        console.say(f"{what}: download interrupted; attempt {attempt + 1} of {ATTEMPTS} in "
                    f"{wait:g} s, resuming at byte {have:,}")
        time.sleep(wait)
    try:
        _verify(partial, source, what, origin=source.url)  # a bad file never takes its name
    except DataError:
        partial.unlink(missing_ok=True)
        raise
    os.replace(partial, target)
    return target


def _fetch_into(partial: Path, source: Source, what: str, limit: int | None) -> None:
    """Append the rest of the file to `partial` (all of it if the server ignores Range), and
    no more than `limit` bytes in all."""
    import urllib.request  # lazy: see _download

    have = partial.stat().st_size if partial.exists() else 0
    request = urllib.request.Request(source.url, headers={"Range": f"bytes={have}-"}
                                     if have else {})
    with urllib.request.urlopen(request, timeout=30) as resp:
        if have and resp.status != 206:
            have = 0  # the server sends the whole file: start again
        length = resp.headers.get("Content-Length")
        total = have + int(length) if length else source.size
        step, shown = max(1, (total or 0) // 4), have
        with open(partial, "ab" if have else "wb") as out:
            while chunk := resp.read(CHUNK):
                out.write(chunk)
                have += len(chunk)
                if limit is not None and have > limit:
                    out.close()
                    partial.unlink()
                    raise DataError(f"{what}: {source.url} sends more than the {limit:,} "
                                    f"bytes the file may have")
                if total and have - shown >= step and have < total:
                    shown = have
                    console.say(f"{what}: {100 * have // total}% of {total / 2**20:.1f} MiB")
            out.flush()
            os.fsync(out.fileno())
        if total and have < total:
            raise OSError(f"connection closed after {have:,} of {total:,} bytes")


def _unreachable(source: Source, what: str, tried: list[str], exc: BaseException
                 ) -> DataError:
    local = f" (no local copy at {', '.join(tried)})" if tried else ""
    return DataError(f"{what}: cannot download {source.url}: {_reason(exc)}{local}; if "
                     f"offline, place {Path(source.file).name} in a mirror directory and pass "
                     f"--data-dir DIR or set QASHIFT_DATA_DIR")


def _reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    return str(reason if reason is not None else exc) or type(exc).__name__
