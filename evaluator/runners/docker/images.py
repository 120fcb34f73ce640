"""Which image a bundle runs in: digest-pinned, a local id, pulled, or built once from the
bundle's Dockerfile and cached by the content hash of its folder, and the digest recorded
with the result. (`runners.images` builds the project's own images; this picks a bundle's.)
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker.errors

from evaluator.bundles import policy
from evaluator.bundles.spec import Bundle
from evaluator.core import settings
from evaluator.core.errors import RunFailure
from evaluator.core.files import exclusive, remove_tree, run_tempdir
from evaluator.core.gate import Refused, folder_digest, no_byte_code, walk
from evaluator.runners import images
from evaluator.runners.docker.removal import LABEL
from evaluator.runners.images import PYTHON_TAG

Connect = Callable[[], Any]  # the Docker client, connected on first use


def resolve_image(connect: Connect, bundle: Bundle,
                  ref: str | None = None) -> tuple[str, str, str]:
    """(image id, reference as given, digest recorded with the result); `ref` overrides
    the bundle's environment (hf-qa bundles run in the standard runner image). `connect` is
    called only once the daemon is needed, so a bundle refused on its own terms never is."""
    env = bundle.environment
    if ref is None and env.get("build"):
        image, tag = _build(connect, bundle, str(env["build"]))
        return image.id, tag, image.id
    ref = str(ref or env.get("image") or PYTHON_TAG)  # command bundles naming no image
    image = _local_or_pull(connect, bundle, ref)
    repo_digests = image.attrs.get("RepoDigests") or []
    pinned = ref if "@sha256:" in ref else None
    return image.id, ref, pinned or (repo_digests[0] if repo_digests else image.id)


def _local_or_pull(connect: Connect, bundle: Bundle, ref: str):
    client = connect()  # connecting (and reaping orphans) fails on its own terms
    try:
        return client.images.get(ref)
    except docker.errors.ImageNotFound:
        pass
    except docker.errors.APIError as exc:
        raise RunFailure("image-missing", f"{bundle.id}: bad image reference {ref!r} "
                         f"({_one_line(exc)})") from None
    if ref.startswith("sha256:"):
        raise RunFailure("image-missing", f"{bundle.id}: image {ref[:19]}... is not on "
                         f"this host and a bare id cannot be pulled")
    hint = (" (build it offline: qashift images wheelhouse DIR && qashift images runner "
            "DIR)" if ref.startswith("qashift/runner") else
            " (build it offline: qashift images python)" if ref.startswith("qashift/")
            else "")
    try:
        repository, tag = _split_ref(ref)
        client.api.pull(repository, tag=tag)
        return client.images.get(ref)
    except docker.errors.DockerException as exc:
        raise RunFailure("image-missing", f"{bundle.id}: image {ref} is not on this host "
                         f"and pulling it failed: {_one_line(exc)}{hint}") from None


def _build(connect: Connect, bundle: Bundle, dockerfile: str):
    """Build from the bundle folder once per content hash; concurrent builds share a lock."""
    if not (bundle.folder / dockerfile).is_file():
        raise RunFailure("build-failed", f"{bundle.id}: environment.build names "
                         f"{dockerfile}, which is not in the bundle folder")
    key = folder_digest(bundle.folder, with_mode=True)
    # "-g": built from a context made through the gate (images of earlier contexts, which
    # held byte-code caches, are never reused for it)
    tag = f"qashift-bundle/{_repo_name(bundle.id)}:{key[:12]}-g"
    with exclusive(settings.cache_dir() / "docker-build-locks" / f"{key[:16]}.lock"):
        try:
            return connect().images.get(tag), tag
        except docker.errors.ImageNotFound:
            pass
        network = policy.current().build_network  # the operator's, never the bundle's
        try:
            with run_tempdir("build") as tmp:
                context = Path(tmp) / "context"
                try:
                    images.build(build_context(bundle.folder, context, key), tag,
                                 dockerfile=dockerfile, network_mode=network,
                                 say=lambda _: None,
                                 labels={LABEL: "1", "qashift.bundle": bundle.id,
                                         "qashift.context": key})
                finally:
                    remove_tree(context)
        except Refused as exc:
            raise RunFailure("build-failed", f"{bundle.id}: {exc}") from None
        except images.BuildError as exc:
            raise RunFailure("build-failed", f"{bundle.id}: docker build failed: {exc}",
                             exc.log) from None
        except docker.errors.DockerException as exc:
            raise RunFailure("build-failed", f"{bundle.id}: docker build failed: "
                             f"{_one_line(exc)}") from None
        return connect().images.get(tag), tag


def build_context(folder: Path, target: Path, key: str) -> Path:
    """A copy of `folder` made through the gate, holding exactly what its digest `key` covers
    (byte-code caches are not part of a bundle: a `__pycache__` could hold code that no
    reviewer of its sources sees), with the modes a checkout gives: files 0644, or 0755 where
    the digest hashed them executable (a build may run them), folders 0755 (a build may
    write into what it copied, as the user it copied it for)."""
    walked = walk(folder, target=target, with_mode=True, skip=no_byte_code,
                  label=f"build context {folder.name}")
    if walked.digest != key:
        raise Refused(f"build context {folder.name} changed while it was copied")
    for path in [target, *target.rglob("*")]:
        executable = path.is_dir() or str(path.relative_to(target)) in walked.executable
        path.chmod(0o755 if executable else 0o644)
    return target


def _split_ref(ref: str) -> tuple[str, str | None]:
    """'name@sha256:..' -> (name, 'sha256:..'); 'name:tag' -> (name, tag); 'name' -> latest."""
    if "@" in ref:
        name, digest = ref.split("@", 1)
        return name, digest
    name, _, tag = ref.rpartition(":")
    if name and "/" not in tag:
        return name, tag
    return ref, "latest"


def _repo_name(bundle_id: str) -> str:
    return re.sub(r"[^a-z0-9._-]+", "-", bundle_id.lower()).strip("-._") or "bundle"


def _one_line(exc: Exception) -> str:
    text = getattr(exc, "explanation", None) or str(exc)
    text = str(text).strip().splitlines()[0] if str(text).strip() else type(exc).__name__
    return text[:300]
