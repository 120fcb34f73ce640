"""`qashift images ...`: build the project's images on a machine without a registry.

  qashift images base                 debootstrap a Debian root fs, docker import it
  qashift images python               base + Debian's python3 (what command bundles need)
  qashift images wheelhouse DIR       pip download the runner image's wheels on the host
  qashift images runner DIR [--gpu]   the top-level Dockerfile, installing from DIR offline

Each build is skipped when its tag exists (use --force to rebuild).
"""

from __future__ import annotations

from pathlib import Path

import click

from evaluator.core.errors import UserError
from evaluator.core.files import check_output_path
from evaluator.runners import images


def _guard(build):
    """Run a build; its failures (no daemon, debootstrap, apt, pip) become one-line errors."""
    try:
        return build()
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001 - docker, subprocess and OS errors alike
        text = str(getattr(exc, "explanation", None) or exc).strip().splitlines()
        raise UserError(f"{text[-1] if text else type(exc).__name__}") from None


@click.group("images")
def images_group() -> None:
    """Build container images offline (debootstrap + docker import, local wheelhouse)."""


@images_group.command("base")
@click.option("--mirror", default=None, help="Debian mirror (default deb.debian.org)")
@click.option("--force", is_flag=True, help="rebuild even if the image exists")
def images_base(mirror, force) -> None:
    """qashift/base:bookworm from debootstrap --variant=minbase (about 30-60 s)."""
    image_id = _guard(lambda: images.build_base(mirror=mirror or images.DEFAULT_MIRROR,
                                                force=force, say=click.echo))
    click.echo(f"{images.BASE_TAG} {image_id}")


@images_group.command("python")
@click.option("--force", is_flag=True, help="rebuild even if the image exists")
def images_python(force) -> None:
    """qashift/python:bookworm: the base image plus Debian's python3."""
    image_id = _guard(lambda: images.build_python(force=force, say=click.echo))
    click.echo(f"{images.PYTHON_TAG} {image_id}")


@images_group.command("wheelhouse")
@click.argument("dest", type=click.Path(file_okay=False, path_type=Path))
@click.option("--gpu", is_flag=True, help="onnxruntime-gpu and PyPI's CUDA torch")
@click.option("--extra", multiple=True, help="another requirement to include (repeatable)")
def images_wheelhouse(dest: Path, gpu, extra) -> None:
    """Download the runner image's wheels into DEST (run where pip reaches PyPI; outside
    the workspace, not a link)."""
    check_output_path(dest, what="the wheelhouse", folder=True)
    _guard(lambda: images.make_wheelhouse(dest, gpu=gpu, extra=tuple(extra), say=click.echo))
    click.echo(f"wheelhouse ready: {dest} ({len(list(dest.glob('*.whl')))} wheels)")


@images_group.command("runner")
@click.argument("wheelhouse", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--gpu", is_flag=True, help="build with GPU=1 (onnxruntime-gpu)")
@click.option("--tag", default=None, help="image tag (default qashift/runner:cpu or :gpu)")
@click.option("--force", is_flag=True, help="rebuild even if the image exists")
def images_runner(wheelhouse: Path, gpu, tag, force) -> None:
    """The standard runner image from the top-level Dockerfile, offline from WHEELHOUSE."""
    image_id = _guard(lambda: images.build_runner(wheelhouse, gpu=gpu, tag=tag, force=force,
                                                  say=click.echo))
    click.echo(f"{tag or images.RUNNER_TAGS[gpu]} {image_id}")
