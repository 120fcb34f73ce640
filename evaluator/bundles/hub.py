"""Models named by a Hugging Face hub id: found in the operator's local hub cache, never
downloaded (runs are offline)."""

from __future__ import annotations

import re
from pathlib import Path

from evaluator.core import settings

HUB_ID = re.compile(r"^(?:[A-Za-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]*$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


def hub_snapshot(hub_id: str, revision: str | None = None) -> Path | None:
    """The snapshot folder of a Hugging Face model in the local hub cache (never a download:
    runs are offline), or None. A 40-hex revision is a commit; else a branch or tag."""
    repo = settings.hf_hub_cache() / ("models--" + hub_id.replace("/", "--"))
    revision = revision or "main"
    if not _COMMIT.match(revision):
        ref = repo / "refs" / revision
        if not ref.is_file():
            return None
        revision = ref.read_text(encoding="utf-8").strip()
    snapshot = repo / "snapshots" / revision
    return snapshot if snapshot.is_dir() else None


def hub_missing(hub_id: str, revision: str | None) -> str:
    return (f"{hub_id} ({revision or 'main'}) is not in the local Hugging Face cache "
            f"({settings.hf_hub_cache()}): runs are offline; download it where there is "
            f"network (`huggingface-cli download {hub_id}`) and copy the cache here, or set "
            f"HF_HUB_CACHE")
