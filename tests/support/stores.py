"""What tests of the results store share."""

from __future__ import annotations

from evaluator.core.hashing import sha256_bytes
from evaluator.store.store import Store


def raw_object(store: Store, data: bytes) -> str:
    """`data` written straight into the store's objects, as a store of an earlier version, a
    hostile store being imported or a hand at the disk could hold it (`put_object` keeps
    bytes that name the row mark behind a `#`); its sha256."""
    sha = sha256_bytes(data)
    path = store.object_path(sha)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return sha
