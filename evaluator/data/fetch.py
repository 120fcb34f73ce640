"""Obtain a public data file by content hash: cache, then local mirrors, then its URL.

The sha256 in a folder's yaml is the file's identity. Nothing is used before its hash is
checked, and a file that fails the check is never put in the cache.
"""

from __future__ import annotations

import shutil
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from evaluator.core import settings
from evaluator.core.errors import DataError
from evaluator.core.files import atomic_file
from evaluator.core.hashing import CHUNK, sha256_of


@dataclass(frozen=True)
class Source:
    """A remote file: its path inside a mirror, its sha256 and where it is published."""

    file: str
    sha256: str
    url: str | None = None
    size: int | None = None


def cached_path(sha256: str) -> Path:
    return settings.cache_dir() / "files" / sha256[:2] / sha256


def fetch(source: Source, what: str, mirrors: list[Path] | None = None) -> Path:
    """Return a verified local path for `source`; `what` names it in error messages."""
    target = cached_path(source.sha256)
    if target.exists():
        if sha256_of(target) == source.sha256:
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
        return _download(source, target, what, tried)
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


def _download(source: Source, target: Path, what: str, tried: list[str]) -> Path:
    try:
        with atomic_file(target) as (out, tmp), \
                urllib.request.urlopen(source.url, timeout=30) as resp:
            shutil.copyfileobj(resp, out, CHUNK)
            out.flush()
            _verify(tmp, source, what, origin=source.url)  # a bad file never takes its name
        return target
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        local = f" (no local copy at {', '.join(tried)})" if tried else ""
        raise DataError(f"{what}: cannot download {source.url}: {_reason(exc)}{local}; "
                        f"if offline, place {Path(source.file).name} in a mirror directory "
                        f"and pass --data-dir DIR or set QASHIFT_DATA_DIR") from None


def _reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    return str(reason if reason is not None else exc) or type(exc).__name__
