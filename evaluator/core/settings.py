"""Where things live: the workspace (results store and objects), the download cache, the data
mirrors and the folder roots, as one Settings object.

Settings come from the environment (`Settings.from_env`) with command-line flags on top
(`override`, used by the CLI for the length of one command). Code below the CLI reads them
through `current()` or the accessors below, and a child process that must see the same
places (a Slurm job) gets them through `child_env()`: nothing writes `os.environ`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]  # the tree that holds the package
PACKAGED = Path(__file__).resolve().parents[1] / "checkout"  # a wheel's copy of the folders
# (setup.py): the default root of an installed package, which has no checkout around it
DEFAULT_ROOT = PACKAGED if not (REPO_ROOT / "testsets").is_dir() and PACKAGED.is_dir() \
    else REPO_ROOT
ENV = {"root": "QASHIFT_ROOT", "workspace": "QASHIFT_WORKSPACE", "cache": "QASHIFT_CACHE",
       "mirrors": "QASHIFT_DATA_DIR", "testsets": "QASHIFT_TESTSETS",
       "submissions": "QASHIFT_SUBMISSIONS", "policy": "QASHIFT_POLICY",
       "model_stores": "QASHIFT_MODEL_STORE"}


def project_root(environ: Mapping[str, str] = os.environ) -> Path:
    """The checkout whose folders (testsets/, submissions/, frozen/, results/, studies/,
    figures/) every default path names: $QASHIFT_ROOT, else this source tree, whatever the
    current directory (an installed wheel: the copy of the folders it carries)."""
    return Path(environ.get(ENV["root"]) or DEFAULT_ROOT)


@dataclass(frozen=True)
class Settings:
    workspace: Path  # the results store: $QASHIFT_WORKSPACE, default ./.qashift
    cache: Path  # downloaded and derived files by sha256: $QASHIFT_CACHE, ~/.cache/qashift
    mirrors: tuple[Path, ...]  # local copies of public data tried before any URL
    testsets: Path  # the test-set folders: $QASHIFT_TESTSETS, else <root>/testsets, where
    # root is $QASHIFT_ROOT or this source tree (an installed wheel names a checkout there)
    submissions: Path  # the bundle folders: $QASHIFT_SUBMISSIONS, else <root>/submissions
    policy: Path | None = None  # the operator's sandbox policy file: $QASHIFT_POLICY
    model_stores: tuple[Path, ...] = ()  # folders a bundle's model.path may name: the cache
    # and $QASHIFT_MODEL_STORE (os.pathsep list); nowhere else on the host

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Settings:
        home_cache = Path(environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "qashift"
        root = project_root(environ)
        return cls(
            workspace=Path(environ.get(ENV["workspace"], ".qashift")).resolve(),
            cache=Path(environ.get(ENV["cache"], home_cache)).resolve(),
            mirrors=tuple(Path(p) for p in environ.get(ENV["mirrors"], "").split(os.pathsep)
                          if p),
            testsets=Path(environ.get(ENV["testsets"], root / "testsets")),
            submissions=Path(environ.get(ENV["submissions"], root / "submissions")),
            policy=Path(environ[ENV["policy"]]).resolve() if environ.get(ENV["policy"]) else None,
            model_stores=tuple(Path(p).resolve() for p in
                               environ.get(ENV["model_stores"], "").split(os.pathsep) if p),
        )

    def with_flags(self, *, data_dir: tuple[str, ...] = (), workspace: str | None = None,
                   root: str | None = None) -> Settings:
        """These settings with `--data-dir` mirrors first, `--workspace` and a root (whose
        testsets/ and submissions/ folders are used) if given."""
        mirrors = tuple(Path(d).resolve() for d in data_dir) + self.mirrors
        out = replace(self, mirrors=mirrors,
                      workspace=Path(workspace).resolve() if workspace else self.workspace)
        if root:
            out = replace(out, testsets=Path(root).resolve() / "testsets",
                          submissions=Path(root).resolve() / "submissions")
        return out

    def child_env(self) -> dict[str, str]:
        """Environment variables that give a child process these same settings."""
        return {ENV["workspace"]: str(self.workspace), ENV["cache"]: str(self.cache),
                ENV["mirrors"]: os.pathsep.join(str(m) for m in self.mirrors),
                ENV["testsets"]: str(self.testsets), ENV["submissions"]: str(self.submissions),
                **({ENV["policy"]: str(self.policy)} if self.policy else {}),
                **({ENV["model_stores"]: os.pathsep.join(str(p) for p in self.model_stores)}
                   if self.model_stores else {})}


_FLAGS: dict = {}  # the running command's flags, set by `override`


_MADE: dict[tuple, Settings] = {}  # by what they are made of: read once, not per bundle


def current() -> Settings:
    """The environment's settings with the running command's flags applied (made again
    whenever the environment, the working folder or the flags differ)."""
    key = (tuple(os.environ.get(name) for name in (*ENV.values(), "XDG_CACHE_HOME", "HOME")),
           os.getcwd(), repr(sorted(_FLAGS.items())))
    found = _MADE.get(key)
    if found is None:
        settings = Settings.from_env()
        found = settings.with_flags(**_FLAGS) if _FLAGS else settings
        if len(_MADE) >= 64:
            _MADE.clear()
        _MADE[key] = found
    return found


@contextmanager
def override(*, data_dir: tuple[str, ...] = (), workspace: str | None = None,
             root: str | None = None) -> Iterator[Settings]:
    """Apply command-line flags (or the Python API's arguments) for the duration of one
    command or call (they do not outlive it)."""
    previous = dict(_FLAGS)
    if data_dir:
        _FLAGS["data_dir"] = tuple(data_dir) + tuple(_FLAGS.get("data_dir", ()))
    if workspace:
        _FLAGS["workspace"] = workspace
    if root:
        _FLAGS["root"] = str(root)
    try:
        yield current()
    finally:
        _FLAGS.clear()
        _FLAGS.update(previous)


def workspace_dir() -> Path:
    return current().workspace


def cache_dir() -> Path:
    return current().cache


def mirror_dirs() -> list[Path]:
    return list(current().mirrors)


def testsets_dir() -> Path:
    return current().testsets


def submissions_dir() -> Path:
    return current().submissions


def hf_hub_cache(environ: Mapping[str, str] = os.environ) -> Path:
    """The local Hugging Face hub cache: $HF_HUB_CACHE, else $HF_HOME/hub, else
    ~/.cache/huggingface/hub (where `huggingface-cli download` puts models)."""
    if environ.get("HF_HUB_CACHE"):
        return Path(environ["HF_HUB_CACHE"])
    home = environ.get("HF_HOME") or Path(environ.get("XDG_CACHE_HOME", Path.home() / ".cache"),
                                          "huggingface")
    return Path(home) / "hub"
