"""Where things live: the workspace (results store and objects), the download cache, the mirror.

Every location can be set by an environment variable so that tests and users on shared
machines never write where they do not mean to.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def workspace_dir() -> Path:
    """The results store lives here: $QASHIFT_WORKSPACE, default ./.qashift."""
    return Path(os.environ.get("QASHIFT_WORKSPACE", ".qashift")).resolve()


def cache_dir() -> Path:
    """Downloaded and derived files, by sha256: $QASHIFT_CACHE, default ~/.cache/qashift."""
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "qashift"
    return Path(os.environ.get("QASHIFT_CACHE", default)).resolve()


def mirror_dirs() -> list[Path]:
    """Local mirrors of public data, tried before any URL: $QASHIFT_DATA_DIR (os.pathsep list)."""
    value = os.environ.get("QASHIFT_DATA_DIR", "")
    return [Path(p) for p in value.split(os.pathsep) if p]


def testsets_dir() -> Path:
    return Path(os.environ.get("QASHIFT_TESTSETS", REPO_ROOT / "testsets"))


def submissions_dir() -> Path:
    return Path(os.environ.get("QASHIFT_SUBMISSIONS", REPO_ROOT / "submissions"))
