"""The files a results store keeps beside its index: objects (predictions, scores, logs, row
copies) named by their sha256, and trained weights under models/<digest>. Both are written
privately and renamed into place, so a killed process never leaves a half-written file that
would be trusted, and both are checked against their name when read or reused."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from evaluator.core.errors import UserError
from evaluator.core.files import PARTIAL_PREFIX, remove_tree, write_atomic
from evaluator.core.gate import Limits, is_digest, walk
from evaluator.core.hashing import sha256_bytes, sha256_of
from evaluator.core.owner import owner_alive, owner_id


def checked_digest(digest: str) -> str:
    """A digest names a file under the store, never a path: 64 hex characters or refused."""
    if not is_digest(digest):
        raise UserError(f"{str(digest)[:80]!r} is not a sha256 digest (64 hex characters)")
    return digest


def object_path(workspace: Path, sha256: str) -> Path:
    return workspace / "objects" / sha256[:2] / checked_digest(sha256)


def put_object(workspace: Path, data: bytes) -> str:
    """Keep `data` as the object named by its sha256 (once: an intact copy is kept); the
    sha256."""
    sha = sha256_bytes(data)
    target = object_path(workspace, sha)
    if target.exists() and sha256_of(target) == sha:
        return sha
    write_atomic(target, data)
    return sha


def get_object(workspace: Path, sha256: str) -> bytes | None:
    """The object's bytes, or None when it is missing or fails its hash."""
    path = object_path(workspace, sha256)
    if not path.is_file():
        return None
    data = path.read_bytes()
    return data if sha256_bytes(data) == sha256 else None


def model_path(workspace: Path, weights_digest: str) -> Path:
    return workspace / "models" / checked_digest(weights_digest)


def put_model(workspace: Path, folder: Path, expected: str | None = None,
              limits: Limits | None = None, label: str = "") -> str:
    """Walk a folder of weights through the gate, copying exactly what it hashes, read-only,
    to models/<its digest>; the digest. With `expected`, a folder that hashes to anything else
    is refused and nothing is stored. The copy is a private one renamed into place, so two
    controllers freezing the same weights at once never write into one folder: the first
    rename wins and the other copy goes."""
    models = workspace / "models"
    models.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f"{PARTIAL_PREFIX}{owner_id()}-", dir=models))
    try:
        digest = walk(folder, target=partial / "w", limits=limits or Limits(),
                      label=label or str(folder)).digest
        if expected is not None and digest != expected:
            raise UserError(f"{label or folder}: its weights hash to {digest[:12]}, not "
                            f"to the {expected[:12]} its row names; refused")
        target = model_path(workspace, digest)
        if not target.is_dir():
            try:
                (partial / "w").rename(target)
            except OSError:
                if not target.is_dir():
                    raise
    finally:
        remove_tree(partial)
    _remove_stale_copies(models)
    return digest


def _remove_stale_copies(models: Path) -> None:
    """Copies of weights left by a freeze that was killed (its process is gone)."""
    for stale in models.glob(f"{PARTIAL_PREFIX}*"):
        owner = _COPY_OWNER.fullmatch(stale.name[len(PARTIAL_PREFIX):])
        if owner is not None and not owner_alive(owner.group(1)):
            try:
                remove_tree(stale)
            except OSError:
                pass  # another controller removed it first, or will


_COPY_OWNER = re.compile(r"(.+:\d+)-[^-]+")  # host:pid-<mkdtemp's random part>
